package image

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A control paragraph's Source field names the source package, with its
// version when it differs from the binary's (binNMUs: libselinux1
// 3.4-1+b6 is built from libselinux 3.4-1).
func TestDebianPackages(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(statusDir+"/libselinux1", "Package: libselinux1\nSource: libselinux (3.4-1)\nVersion: 3.4-1+b6\nArchitecture: arm64\nDescription: SELinux\n runtime shared libraries\n")
	write(statusDir+"/iptables", "Package: iptables\nVersion: 1.8.9-2\nArchitecture: arm64\n")
	write("/usr/share/doc/libselinux1/copyright", "public domain")
	write("/usr/share/doc/iptables/copyright", "GPL-2+")
	pkgs, files, err := DebianPackages(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []Package{
		{Name: "iptables", Version: "1.8.9-2", Arch: "arm64", Source: "iptables", SourceVersion: "1.8.9-2"},
		{Name: "libselinux1", Version: "3.4-1+b6", Arch: "arm64", Source: "libselinux", SourceVersion: "3.4-1"},
	}
	if len(pkgs) != 2 || pkgs[0] != want[0] || pkgs[1] != want[1] {
		t.Errorf("packages %+v, want %+v", pkgs, want)
	}
	if len(files) != 4 {
		t.Errorf("files %+v, want each package's control paragraph and copyright", files)
	}
	// A package without its copyright file is refused, named.
	if err := os.Remove(filepath.Join(root, "/usr/share/doc/iptables/copyright")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := DebianPackages(root); err == nil || !strings.Contains(err.Error(), "package iptables: its copyright file") {
		t.Errorf("without a copyright file: %v", err)
	}
}

// The SBOM's purls escape what a purl version may not hold, and name a
// source package that differs from the binary's.
func TestSPDX(t *testing.T) {
	sbom := SBOM{Name: "istio-cni", Version: "v1.0.0", Arch: "arm64", Distro: "debian-12", GoVersion: "go1.26.8",
		Debian: []Package{{Name: "libc6", Version: "2.36-9+deb12u14", Arch: "arm64", Source: "glibc", SourceVersion: "2.36-9+deb12u14"},
			{Name: "libselinux1", Version: "3.4-1+b6", Arch: "arm64", Source: "libselinux", SourceVersion: "3.4-1"}},
		Go: []GoModule{{Path: "k8s.io/client-go", Version: "v0.36.3"}}}
	doc, err := sbom.SPDX()
	if err != nil {
		t.Fatal(err)
	}
	// Other contents under the same name and version: another namespace.
	sbom.Go[0].Version = "v0.36.4"
	other, err := sbom.SPDX()
	if err != nil {
		t.Fatal(err)
	}
	ns := func(doc []byte) string {
		var d struct{ DocumentNamespace string }
		_ = json.Unmarshal(doc, &d)
		return d.DocumentNamespace
	}
	if a, b := ns(doc), ns(other); a == b || !strings.HasPrefix(a, "https://spdx.org/spdxdocs/istio-cni-v1.0.0-arm64-") {
		t.Errorf("namespaces %q and %q: want distinct, each the image's name, version and arch and a hash", a, b)
	}
	var parsed struct {
		Packages []struct {
			ID   string                              `json:"SPDXID"`
			Refs []struct{ ReferenceLocator string } `json:"externalRefs"`
		}
		Relationships []struct{ RelationshipType string }
	}
	if err := json.Unmarshal(doc, &parsed); err != nil {
		t.Fatal(err)
	}
	var purls []string
	for _, p := range parsed.Packages {
		for _, r := range p.Refs {
			purls = append(purls, r.ReferenceLocator)
		}
	}
	if strings.Contains(string(doc), `\u0026`) {
		t.Error("the purls' & escaped")
	}
	want := []string{"pkg:deb/debian/libc6@2.36-9%2Bdeb12u14?arch=arm64&distro=debian-12&upstream=glibc",
		"pkg:deb/debian/libselinux1@3.4-1%2Bb6?arch=arm64&distro=debian-12&upstream=libselinux%403.4-1",
		"pkg:golang/stdlib@1.26.8", "pkg:golang/k8s.io/client-go@v0.36.3"}
	if strings.Join(purls, " ") != strings.Join(want, " ") {
		t.Errorf("purls %q, want %q", purls, want)
	}
	if len(parsed.Relationships) != 5 || parsed.Packages[3].ID != "SPDXRef-go-stdlib" {
		t.Errorf("relationships %v, ids %v", parsed.Relationships, parsed.Packages)
	}
}

// Licence files are found under the module cache's case encoding; a
// module with none is refused, named.
func TestGoLicenses(t *testing.T) {
	cache := t.TempDir()
	dir := filepath.Join(cache, "github.com", "!burnt!sushi", "toml@v1.5.0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"COPYING", "README.md"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files, err := GoLicenses(cache, "/doc", []GoModule{{Path: "github.com/BurntSushi/toml", Version: "v1.5.0"}})
	if err != nil || len(files) != 1 || files[0].Path != "/doc/github.com/BurntSushi/toml@v1.5.0/COPYING" {
		t.Fatalf("files %+v, %v", files, err)
	}
	if _, err := GoLicenses(cache, "/doc", []GoModule{{Path: "example.dev/none", Version: "v1.0.0"}}); err == nil || !strings.Contains(err.Error(), "example.dev/none@v1.0.0") {
		t.Errorf("a module not in the cache: %v", err)
	}
}

// WriteIndex puts one image per architecture in an OCI index a layout
// reader reads back; two images of one architecture are refused.
func TestWriteIndex(t *testing.T) {
	dir := t.TempDir()
	var archives []string
	for _, arch := range []string{"amd64", "arm64"} {
		s := testSpec(t)
		s.Arch = arch
		p := filepath.Join(dir, arch+".tar")
		if err := WriteArchive(p, build(t, s), "localhost/istio-cni/install-cni:0.1.0"); err != nil {
			t.Fatal(err)
		}
		archives = append(archives, p)
	}
	out := filepath.Join(dir, "index.tar")
	if err := WriteIndex(out, "localhost/istio-cni/install-cni:0.1.0", archives); err != nil {
		t.Fatal(err)
	}
	idx, name, err := ReadIndex(out, t.TempDir())
	if err != nil || name != "localhost/istio-cni/install-cni:0.1.0" {
		t.Fatalf("reading the index back: %v, named %q", err, name)
	}
	im, _ := idx.IndexManifest()
	var got []string
	for _, d := range im.Manifests {
		got = append(got, d.Platform.Architecture)
	}
	if strings.Join(got, ",") != "amd64,arm64" {
		t.Errorf("platforms %v", got)
	}
	if err := WriteIndex(out, "localhost/istio-cni/install-cni:0.1.0", []string{archives[0], archives[0]}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "linux/amd64 already in") {
		t.Errorf("two amd64 images: %v", err)
	}
}
