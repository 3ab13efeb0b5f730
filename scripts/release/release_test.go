package main

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// goEnv reads one variable of the go command's environment.
func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// gocmd runs the go command in dir with the environment of a user outside
// this repository: no workspace, the release's proxy first.
func gocmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The release installs the way a user installs it: from a file:// module
// proxy holding this tree's modules at v0.1.0 (and the public proxy, or
// the module cache's copy of it, for every other module), with
// GOWORK=off, in a module cache of its own: go install of both commands,
// which then run and name their versions, and go get of the library by a
// program that builds and runs.
func TestInstallFromProxy(t *testing.T) {
	const version = "v0.1.0"
	work := t.TempDir()
	proxy := filepath.Join(work, "proxy")
	mods, err := writeProxy("../..", proxy, version, time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != len(released) {
		t.Fatalf("modules %v", mods)
	}
	checkRootZip(t, filepath.Join(proxy, "github.com", "floodgate-go", "floodgate", "@v", version+".zip"))

	// Third-party modules come from the module cache's download
	// directory (itself a proxy), else from the configured proxy.
	upstream := goEnv(t, "GOPROXY")
	if upstream == "" || upstream == "off" {
		upstream = "https://proxy.golang.org"
	}
	modcache := filepath.Join(work, "modcache")
	gobin := filepath.Join(work, "bin")
	env := []string{
		"GOWORK=off",
		"GOFLAGS=-mod=mod -trimpath", // -trimpath: build cache entries that do not depend on where the module cache is
		"GOTOOLCHAIN=local",
		"GOPROXY=file://" + filepath.ToSlash(proxy) + ",file://" + filepath.ToSlash(filepath.Join(goEnv(t, "GOMODCACHE"), "cache", "download")) + "," + upstream,
		// The checksum database cannot know an unpublished release; every
		// other module is checked against it as for any user.
		"GONOSUMDB=github.com/floodgate-go",
		"GOMODCACHE=" + modcache,
		"GOBIN=" + gobin,
	}
	// The module cache is read-only: go clean empties it.
	t.Cleanup(func() {
		c := exec.Command("go", "clean", "-modcache")
		c.Env = append(os.Environ(), "GOMODCACHE="+modcache, "GOWORK=off")
		_ = c.Run()
	})
	outside := t.TempDir() // not inside any module

	gocmd(t, outside, env, "install", "github.com/floodgate-go/floodgate/rls/cmd/floodgate-rls@"+version)
	out, err := exec.Command(filepath.Join(gobin, "floodgate-rls"), "-version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "floodgate-rls v0.1.0 (floodgate v0.1.0)" {
		t.Fatalf("floodgate-rls -version: %q, %v", out, err)
	}

	gocmd(t, outside, env, "install", "github.com/floodgate-go/floodgate/cmd/floodgate@"+version)
	out, err = exec.Command(filepath.Join(gobin, "floodgate"), "version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "floodgate "+version+" (floodgate library "+version+")" {
		t.Fatalf("floodgate version: %q, %v", out, err)
	}

	// A program of a user's: go get the library, build, run.
	prog := t.TempDir()
	if err := os.WriteFile(filepath.Join(prog, "go.mod"), []byte("module example.com/app\n\ngo 1.26.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prog, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	gocmd(t, prog, env, "get", "github.com/floodgate-go/floodgate@"+version)
	gocmd(t, prog, env, "build", "-o", filepath.Join(work, "app"), ".")
	out, err = exec.Command(filepath.Join(work, "app")).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "true true true false" {
		t.Fatalf("the program: %q, %v; want 3 admitted then 1 refused", out, err)
	}
	if gomod, _ := os.ReadFile(filepath.Join(prog, "go.mod")); !strings.Contains(string(gomod), "github.com/floodgate-go/floodgate v0.1.0") {
		t.Fatalf("go.mod after go get:\n%s", gomod)
	}
}

// program uses the library as the README's quickstart does.
const program = `package main

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/store/memstore"
)

func main() {
	s, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := bucket.NewKeyed(s, bucket.Config{Name: "per-client", Rate: floodgate.PerHour(1), Burst: 3})
	if err != nil {
		panic(err)
	}
	var out []any
	for range 4 {
		d, err := lim.Take(context.Background(), "client", 1)
		if err != nil {
			panic(err)
		}
		out = append(out, d.Allowed)
	}
	fmt.Println(out...)
}
`

// checkRootZip: the library's zip holds its packages and its go.mod, and
// none of the nested modules (rls, cmd/floodgate, the benchmarks, this
// one), which are modules of their own.
func checkRootZip(t *testing.T, path string) {
	t.Helper()
	z, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	const prefix = "github.com/floodgate-go/floodgate@v0.1.0/"
	have := map[string]bool{}
	for _, f := range z.File {
		name := strings.TrimPrefix(f.Name, prefix)
		have[name] = true
		for _, nested := range []string{"rls/", "cmd/floodgate/", "benchmarks/", "scripts/release/"} {
			if strings.HasPrefix(name, nested) {
				t.Errorf("the library's zip holds %s, of the nested module %s", name, nested)
			}
		}
	}
	for _, want := range []string{"go.mod", "floodgate.go", "bucket/doc.go", "store/memstore/memstore.go", "deploy/prometheus/floodgate-rules.yml"} {
		if !have[want] {
			t.Errorf("the library's zip lacks %s", want)
		}
	}
}

// A version that is not canonical, and a module with a replace directive,
// are refused.
func TestWriteProxyRefuses(t *testing.T) {
	if _, err := writeProxy("../..", t.TempDir(), "0.1", time.Now()); err == nil {
		t.Error("version 0.1 accepted")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/m\n\ngo 1.26.0\n\nreplace example.com/x => ../x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := writeModule(dir, t.TempDir(), "v0.1.0", time.Now()); err == nil || !strings.Contains(err.Error(), "replace") {
		t.Errorf("a module with a replace directive: %v", err)
	}
}
