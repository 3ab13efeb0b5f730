// Command release writes the released modules of this repository as a Go
// module proxy (GOPROXY=file://DIR): for each module, its version list,
// .info, .mod and .zip, made with golang.org/x/mod/zip as the module proxy
// and the go command make them. Cut a release with it, or prove one:
//
//	go run ./scripts/release -version v0.1.0 -out /tmp/proxy
//	GOWORK=off GOPROXY=file:///tmp/proxy,https://proxy.golang.org GONOSUMDB=github.com/floodgate-go \
//	    go install github.com/floodgate-go/floodgate/rls/cmd/floodgate-rls@v0.1.0
//
// Its test does exactly that, for every command of the repository, in a
// module cache of its own. It is a module of its own so that the library's
// users never download golang.org/x/mod.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// released are the directories (from the repository's root) of the modules
// a release publishes, all at one version. The benchmark modules and this
// one are not released.
var released = []string{".", "rls", "cmd/floodgate"}

func main() {
	root := flag.String("root", ".", "the repository's root")
	out := flag.String("out", "", "the proxy directory to write (required)")
	version := flag.String("version", "", "the version of every released module, e.g. v0.1.0 (required)")
	flag.Parse()
	if *out == "" || *version == "" {
		fmt.Fprintln(os.Stderr, "release: -out and -version are required")
		os.Exit(2)
	}
	mods, err := writeProxy(*root, *out, *version, time.Now())
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	for _, m := range mods {
		fmt.Println(m.Path, m.Version)
	}
}

// writeProxy writes the released modules under root at version into the
// proxy directory out, and returns them.
func writeProxy(root, out, version string, at time.Time) ([]module.Version, error) {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return nil, fmt.Errorf("version %q: want a canonical semantic version such as v0.1.0", version)
	}
	var mods []module.Version
	for _, dir := range released {
		m, err := writeModule(filepath.Join(root, dir), out, version, at)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		mods = append(mods, m)
	}
	return mods, nil
}

// writeModule writes the module in dir into the proxy directory out.
func writeModule(dir, out, version string, at time.Time) (module.Version, error) {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return module.Version{}, err
	}
	f, err := modfile.Parse(filepath.Join(dir, "go.mod"), gomod, nil)
	if err != nil {
		return module.Version{}, err
	}
	if f.Module == nil {
		return module.Version{}, errors.New("go.mod has no module line")
	}
	if len(f.Replace) > 0 {
		// A replace directive holds only in its own module: users of a
		// released module would build something else than its tests did.
		return module.Version{}, fmt.Errorf("go.mod has %d replace directive(s): a released module has none", len(f.Replace))
	}
	m := module.Version{Path: f.Module.Mod.Path, Version: version}
	esc, err := module.EscapePath(m.Path)
	if err != nil {
		return module.Version{}, err
	}
	at1 := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(at1, 0o755); err != nil {
		return module.Version{}, err
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, at.UTC()})
	files := map[string][]byte{"list": []byte(version + "\n"), version + ".info": info, version + ".mod": gomod}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(at1, name), b, 0o644); err != nil {
			return module.Version{}, err
		}
	}
	z, err := os.Create(filepath.Join(at1, version+".zip"))
	if err != nil {
		return module.Version{}, err
	}
	// CreateFromDir leaves out nested modules (directories with a go.mod
	// of their own), version control directories and vendor/.
	if err := modzip.CreateFromDir(z, m, dir); err != nil {
		z.Close()
		return module.Version{}, err
	}
	return m, z.Close()
}
