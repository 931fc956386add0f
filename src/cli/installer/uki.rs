//! A Talos UKI's initramfs: the bytes of the PE file's `.initrd` section.
//!
//! Owns finding the section; does not own what is in it (`initrd`). Talos's own reader takes the
//! section's first `VirtualSize` bytes (`internal/pkg/uki/internal/pe/extract.go:32-40`, both
//! tags); so does this (`object`'s `pe_data`: the smaller of the virtual and the raw size, the
//! rest being file-alignment padding).

use object::read::pe::PeFile64;

/// The section Talos's UKI builder names the initramfs (`internal/pkg/uki/uki.go:27`).
const SECTION: &[u8] = b".initrd";

/// Why the UKI yields no initramfs.
#[derive(Debug, thiserror::Error)]
pub enum UkiError {
    /// Not a PE32+ file (UKIs for amd64 and arm64 both are).
    #[error("not a PE32+ (UEFI) file")]
    NotPe(#[source] object::read::Error),
    /// A PE file without the section.
    #[error("a PE file without an .initrd section (sections: {0})")]
    NoInitrd(String),
    /// The section's data lies outside the file.
    #[error("the .initrd section is truncated")]
    Truncated(#[source] object::read::Error),
}

/// The `.initrd` section of the UKI `pe`.
pub fn initrd(pe: &[u8]) -> Result<&[u8], UkiError> {
    let file = PeFile64::parse(pe).map_err(UkiError::NotPe)?;
    let sections = file.section_table();
    match sections.iter().find(|s| s.raw_name() == SECTION) {
        Some(section) => section.pe_data(pe).map_err(UkiError::Truncated),
        None => {
            let names: Vec<String> = sections
                .iter()
                .map(|s| String::from_utf8_lossy(s.raw_name()).into_owned())
                .collect();
            Err(UkiError::NoInitrd(names.join(", ")))
        }
    }
}
