// Machine-config patches: generated, patched and validated as talosctl does. Not the extension
// image (extension.go).

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/siderolabs/talos/pkg/machinery/config/bundle"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/gendata"
	"github.com/siderolabs/talos/pkg/machinery/version"
)

const (
	// The patches' own placeholders: talos/v1.14/worker.yaml's KubeClusterConfig must carry the
	// cluster's name, and the worker recovery patches name this endpoint.
	clusterName = "my-cluster"
	endpoint    = "https://api.my-cluster.example:6443"
	esc         = "talos/extension/extension-service-config.yaml"
)

// patchCheck is one `talosctl gen config` run: the file judged, the role, and every patch file
// applied, in order (the judged file last).
type patchCheck struct {
	file    string
	role    machine.Type
	patches []string
	what    string
}

// patchChecks lists the line's patch files with what each is applied with.
func patchChecks(line string) []patchCheck {
	var checks []patchCheck

	for _, role := range []machine.Type{machine.TypeControlPlane, machine.TypeWorker} {
		name := map[machine.Type]string{machine.TypeControlPlane: "controlplane", machine.TypeWorker: "worker"}[role]
		static := fmt.Sprintf("talos/%s/%s.yaml", line, name)
		ext := fmt.Sprintf("talos/extension/%s/%s.yaml", line, name)
		recovery := fmt.Sprintf("talos/recovery/%s/%s.yaml", line, name)

		checks = append(checks,
			patchCheck{static, role, []string{static}, name},
			patchCheck{ext, role, []string{ext, esc}, name + ", with " + filepath.Base(esc)},
			// Recovery is applied to a node that runs readyprism: on top of the role patch.
			patchCheck{recovery, role, []string{static, recovery}, name + ", on " + static},
		)

		if line == "v1.14" {
			selinux := "talos/v1.14/selinux-ca.yaml"
			checks = append(checks, patchCheck{selinux, role, []string{static, selinux}, name + ", on " + static})
		}
	}

	return checks
}

// checkConfigs runs every patch check of the line, then the ExtensionServiceConfig alone.
func checkConfigs(root, line string) []result {
	var results []result

	for _, c := range patchChecks(line) {
		results = append(results, result{c.file, c.what + ": gen config + patch, validate --mode metal --strict", generateAndValidate(root, c)})
	}

	results = append(results, result{esc, "config loader, validate --mode metal --strict", loadAndValidate(filepath.Join(root, esc))})

	return results
}

// generateAndValidate is `talosctl gen config my-cluster <endpoint> --config-patch-<role> @f...`
// (T13 cmd/talosctl/cmd/mgmt/gen/config.go:124-171,228-234,427-445: flag defaults) followed by
// `talosctl validate --mode metal --strict` on the written file (T13 cmd/talosctl/cmd/mgmt/validate.go:30-56).
func generateAndValidate(root string, c patchCheck) error {
	var patches []configpatcher.Patch

	for _, p := range c.patches { // one by one, so an error names its file
		loaded, err := configpatcher.LoadPatches([]string{"@" + filepath.Join(root, p)})
		if err != nil {
			return fmt.Errorf("%s: error parsing config JSON patch: %w", p, err)
		}

		patches = append(patches, loaded...)
	}

	withPatch := bundle.WithPatchWorker
	if c.role == machine.TypeControlPlane {
		withPatch = bundle.WithPatchControlPlane
	}

	b, err := bundle.NewBundle(
		bundle.WithVerbose(false),
		bundle.WithInputOptions(&bundle.InputOptions{
			ClusterName: clusterName,
			Endpoint:    endpoint,
			KubeVersion: constants.DefaultKubernetesVersion, // talosctl's --kubernetes-version default
			GenOptions: []generate.Option{
				generate.WithInstallDisk("/dev/sda"),
				// helpers.DefaultImage(images.DefaultInstallerImageRepository) in talosctl.
				generate.WithInstallImage(gendata.ImagesRegistry + "/" + gendata.ImagesUsername + "/installer:" + version.Tag),
				generate.WithAdditionalSubjectAltNames(nil),
				generate.WithDNSDomain("cluster.local"),
				generate.WithClusterDiscovery(true),
			},
		}),
		withPatch(patches),
	)
	if err != nil {
		return fmt.Errorf("failed to generate config bundle: %w", err)
	}

	out, err := b.Serialize(encoder.CommentsDisabled, c.role)
	if err != nil {
		return err
	}

	return validate(configloader.NewFromBytes(out))
}

// loadAndValidate is `talosctl validate -c FILE --mode metal --strict`.
func loadAndValidate(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}

	return validate(configloader.NewFromBytes(data))
}

// validate runs the mode validation; strict turns warnings into errors, as talosctl's --strict.
// cfg.Validate is T13's only client-side entry point; at T14 it is the deprecated name of
// ValidateAsClient (both call container.validate, T14 config/container/validate.go:29-31,363-365).
func validate(cfg interface {
	Validate(validation.RuntimeMode, ...validation.Option) ([]string, error)
}, err error,
) error {
	if err != nil {
		return err
	}

	_, err = cfg.Validate(metal{}, validation.WithLocal(), validation.WithStrict())

	return err
}
