//! Tests of the writer's composition: the step harness (`step`) and what it shows
//! (`composition`).

mod budget;
mod composition;
mod step;
