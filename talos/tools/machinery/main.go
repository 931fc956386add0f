// Command talos-machinery-check validates readyprism's Talos files with Talos's own config code
// (github.com/siderolabs/talos/pkg/machinery), at the version this build links: the Talos line it
// checks is the module's own version.Tag (v1.13.9 from this go.mod; v1.14.1 from
// ../machinery-v1.14/go.mod, which links these sources), so a build cannot check the other line's
// files by mistake.
//
//	talos-machinery-check [-root REPO]
//
// For each file it prints one line, PASS or FAIL, the file, and on FAIL Talos's error text; it exits
// 1 if any file failed. What it runs, each as Talos does it:
//
//   - every machine-config patch of the line (talos/<line>/, talos/extension/<line>/ with
//     extension-service-config.yaml, talos/recovery/<line>/ on top of the role patch, and on 1.14
//     selinux-ca.yaml on top of each role patch): `talosctl gen config` with talosctl's defaults
//     and `--config-patch-control-plane`/`--config-patch-worker` (config.go), then `talosctl
//     validate --mode metal --strict` on the serialized result, re-read by the config loader;
//   - talos/extension/extension-service-config.yaml alone: the config loader and the same validation;
//   - the extension as the image holds it (extension.go): extensions.Load + Validate with
//     constraints, contents and this line's Talos version; the service spec decoded as machined
//     decodes it (go.yaml.in/yaml/v4) and Spec.Validate.
//
// One check here is ours and stricter than Talos: the service spec is decoded a second time with
// KnownFields, since machined silently ignores a misspelt key. The project's other rules (what
// the patches must say) stay in talos/tools/validate.py and extension_check.py.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/version"
)

// metal is `talosctl validate --mode metal`: talosctl's runtime.ParseMode lives in Talos's
// internal/ tree, so the three-method interface of config/validation/mode.go is implemented here
// with metal's answers (internal/app/machined/pkg/runtime/mode.go, identical at v1.13.9 and v1.14).
type metal struct{}

func (metal) String() string        { return "metal" }
func (metal) RequiresInstall() bool { return true }
func (metal) InContainer() bool     { return false }

// result is one file's verdict: err nil means PASS.
type result struct {
	file string
	what string
	err  error
}

func main() {
	root := flag.String("root", ".", "the repository's top directory")
	flag.Parse()

	talos, err := semver.ParseTolerant(version.Tag)
	if err != nil {
		fmt.Fprintf(os.Stderr, "talos-machinery-check: machinery version.Tag %q: %v\n", version.Tag, err)
		os.Exit(2)
	}

	line := fmt.Sprintf("v%d.%d", talos.Major, talos.Minor)
	results := append(checkConfigs(*root, line), checkExtension(*root, talos)...)

	failed := 0

	for _, r := range results {
		if r.err == nil {
			fmt.Printf("PASS %s (%s; machinery %s)\n", r.file, r.what, version.Tag)

			continue
		}

		failed++

		fmt.Printf("FAIL %s (%s; machinery %s): %s\n", r.file, r.what, version.Tag, oneLine(r.err))
	}

	fmt.Printf("talos-machinery-check %s: %d checked, %d failed\n", version.Tag, len(results), failed)

	if failed > 0 {
		os.Exit(1)
	}
}

// oneLine folds a multierror's list ("2 errors occurred:\n\t* a\n\t* b") onto one line.
func oneLine(err error) string {
	fields := strings.FieldsFunc(err.Error(), func(r rune) bool { return r == '\n' })

	for i, f := range fields {
		fields[i] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(f), "* "))
	}

	return strings.Join(fields, " ")
}
