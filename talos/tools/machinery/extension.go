// The system extension: the image's layout, manifest and service spec, checked as Talos checks
// them when it installs and starts an extension. Not the machine-config patches (config.go).

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/extensions/services"
	"go.yaml.in/yaml/v4"
)

const (
	manifest = "talos/extension/manifest.yaml"
	spec     = "talos/extension/readyprism.yaml"
	// Where talos/extension/Containerfile puts the spec and the binary (the service's root is
	// /usr/local/lib/containers/<name>, T13 pkg/machinery/constants/constants.go).
	specInImage   = "rootfs/usr/local/etc/containers/readyprism.yaml"
	binaryInImage = "rootfs/usr/local/lib/containers/readyprism/readyprism"
)

// checkExtension lays the sources out as the image holds them and checks the extension and its
// service spec for this Talos version.
func checkExtension(root string, talos semver.Version) []result {
	dir, err := os.MkdirTemp("", "readyprism-extension-")
	if err != nil {
		return []result{{manifest, "extension layout", err}}
	}
	defer os.RemoveAll(dir) //nolint:errcheck

	ext := filepath.Join(dir, "readyprism")
	what := fmt.Sprintf("extensions.Load + Validate(constraints, contents, Talos %s)", talos)

	if err = layOut(root, ext); err != nil {
		return []result{{manifest, what, err}}
	}

	return []result{
		{manifest, what, loadExtension(ext, talos)},
		{spec, "yaml v4 decode + services.Spec.Validate, then KnownFields (ours, stricter)", checkSpec(filepath.Join(root, spec))},
	}
}

// layOut builds the image's tree as the Containerfile does: /manifest.yaml, the spec, and a
// stand-in for the binary (its contents are not Talos's concern; its path and mode are).
func layOut(root, ext string) error {
	files := []struct {
		from, to string
		mode     os.FileMode
	}{
		{filepath.Join(root, manifest), "manifest.yaml", 0o644},
		{filepath.Join(root, spec), specInImage, 0o644},
		{"", binaryInImage, 0o755},
	}

	for _, f := range files {
		data := []byte("#!/bin/false\n")

		if f.from != "" {
			var err error
			if data, err = os.ReadFile(f.from); err != nil {
				return err
			}
		}

		to := filepath.Join(ext, f.to)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}

		if err := os.WriteFile(to, data, f.mode); err != nil {
			return err
		}

		if err := os.Chmod(to, f.mode); err != nil { // not left to the umask
			return err
		}
	}

	return nil
}

// loadExtension is what Talos does with an extension image (T13 pkg/machinery/extensions/load.go:19-53,
// validate.go:61-90; the imager calls it so, pkg/imager/extensions/extensions.go).
func loadExtension(dir string, talos semver.Version) error {
	ext, err := extensions.Load(dir)
	if err != nil {
		return err
	}

	return ext.Validate(extensions.WithValidateConstraints(), extensions.WithValidateContents(), extensions.WithTalosVersion(&talos))
}

// checkSpec decodes the spec as machined's ExtensionServiceController.loadSpec does (yaml v4, not
// strict; T13 internal/app/machined/pkg/controllers/runtime/extension_service.go:185-199) and
// validates it (:118). Then, ours and stricter: a second decode with KnownFields, since machined
// would start the service with a misspelt key silently ignored.
func checkSpec(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}

	var s services.Spec
	if err = yaml.NewDecoder(bytes.NewReader(data)).Decode(&s); err != nil {
		return fmt.Errorf("error unmarshalling extension service config: %w", err)
	}

	if err = s.Validate(); err != nil {
		return err
	}

	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)

	var strict services.Spec
	if err = dec.Decode(&strict); err != nil {
		return errors.Join(errors.New("ours, stricter than Talos (which ignores unknown keys)"), err)
	}

	return nil
}
