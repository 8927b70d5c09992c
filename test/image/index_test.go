// Package image reads the release's image back as a registry or a scanner
// would: `make image-index`'s OCI index, each architecture's image, what
// it holds and what its SBOM says it holds.
package image

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	mkimage "istio-cni.local/istio-cni/cmd/mkimage/image"
	"istio-cni.local/istio-cni/test/cluster"
)

// machines are the ELF machines of the architectures the index holds.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// triplets are their Debian multiarch library directories.
var triplets = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

func TestImageIndex(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tarball, err := cluster.MakeImageIndex(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idx, name, err := mkimage.ReadIndex(tarball, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if name == "" {
		t.Error("the index has no name (org.opencontainers.image.ref.name)")
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var arches []string
	versions := map[string]bool{}
	for _, d := range im.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" || d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("manifest %s: platform %+v, media type %s; want linux, OCI", d.Digest, d.Platform, d.MediaType)
			continue
		}
		arch := d.Platform.Architecture
		arches = append(arches, arch)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(arch, func(t *testing.T) { versions[checkImage(t, img, arch)] = true })
	}
	slices.Sort(arches)
	if want := []string{"amd64", "arm64"}; !slices.Equal(arches, want) {
		t.Errorf("architectures %v, want %v", arches, want)
	}
	if len(versions) != 1 {
		t.Errorf("versions %v across the architectures, want one", versions)
	}
}

// checkImage checks one architecture's image and returns its version
// label.
func checkImage(t *testing.T, img v1.Image, arch string) string {
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Architecture != arch || cfg.OS != "linux" {
		t.Errorf("config says %s/%s, the index %s", cfg.OS, cfg.Architecture, arch)
	}
	version := cfg.Config.Labels["org.opencontainers.image.version"]
	if version == "" || cfg.Config.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" {
		t.Errorf("labels %v: want the version and the licence", cfg.Config.Labels)
	}
	files, err := mkimage.Files(img)
	if err != nil {
		t.Fatal(err)
	}
	// Every ELF file is the index entry's architecture: the Go binaries
	// cross-built, Debian's iptables, nsenter, modules and libraries
	// fetched for it. Each one's interpreter and libraries are in the
	// image where its loader looks (the image has no ld.so.cache).
	elves := 0
	for name, data := range files {
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			continue
		}
		elves++
		if f.Machine != machines[arch] {
			t.Errorf("%s is %s, in the %s image", name, f.Machine, arch)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				interp := make([]byte, p.Filesz)
				_, _ = p.ReadAt(interp, 0)
				if i := strings.TrimRight(strings.TrimPrefix(string(interp), "/"), "\x00"); files[i] == nil {
					t.Errorf("%s: its interpreter /%s is not in the image", name, i)
				}
			}
		}
		needed, _ := f.ImportedLibraries()
		for _, lib := range needed {
			found := false
			for _, dir := range []string{"lib/" + triplets[arch], "usr/lib/" + triplets[arch], "lib", "usr/lib"} {
				found = found || files[path.Join(dir, lib)] != nil
			}
			if !found {
				t.Errorf("%s needs %s, not in the image's library directories", name, lib)
			}
		}
	}
	for _, want := range []string{"install-cni", "istio-cni-sidecar", "istio-cni-full", "istio-cni-apilookup",
		"usr/sbin/xtables-nft-multi", "usr/sbin/xtables-legacy-multi", "usr/bin/nsenter",
		"usr/share/doc/istio-cni/LICENSE", "usr/share/doc/istio-cni/NOTICE", "usr/share/doc/istio-cni/go/LICENSE"} {
		if files[want] == nil {
			t.Errorf("no /%s", want)
		}
	}
	if elves < 20 {
		t.Errorf("%d ELF files, want the binaries, iptables' modules and libraries", elves)
	}

	// The SBOM lists what the image holds: each Debian package with its
	// control paragraph in the image (name, version, architecture) and
	// its copyright file; each Go module the binaries link, with its
	// licence files.
	var sbom struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name, VersionInfo string
			Refs              []struct{ ReferenceType, ReferenceLocator string } `json:"externalRefs"`
		}
	}
	if err := json.Unmarshal(files["usr/share/doc/istio-cni/sbom.spdx.json"], &sbom); err != nil || sbom.SPDXVersion != "SPDX-2.3" {
		t.Fatalf("the SBOM: %v, version %q", err, sbom.SPDXVersion)
	}
	purls := map[string]bool{}
	for _, p := range sbom.Packages {
		for _, r := range p.Refs {
			if r.ReferenceType == "purl" {
				purls[r.ReferenceLocator] = true
			}
		}
	}
	debs, licences := 0, 0
	for name, data := range files {
		pkg, ok := strings.CutPrefix(name, "var/lib/dpkg/status.d/")
		if !ok {
			continue
		}
		debs++
		fields := control(data)
		if fields["Package"] != pkg || fields["Architecture"] != arch {
			t.Errorf("%s: Package %q, Architecture %q", name, fields["Package"], fields["Architecture"])
		}
		copyright := files[path.Join("usr/share/doc", pkg, "copyright")]
		if copyright == nil {
			t.Errorf("package %s: no copyright file", pkg)
		}
		// The licence texts a copyright file refers to travel with it.
		for _, m := range commonLicense.FindAllString(string(copyright), -1) {
			licences++
			if files[strings.TrimPrefix(strings.TrimRight(m, ".,;)'\""), "/")] == nil {
				t.Errorf("package %s: its copyright names %s, not in the image", pkg, m)
			}
		}
		found := false
		for purl := range purls {
			found = found || strings.HasPrefix(purl, "pkg:deb/debian/"+pkg+"@"+strings.ReplaceAll(fields["Version"], "+", "%2B")+"?arch="+arch+"&")
		}
		if !found {
			t.Errorf("package %s %s (%s) not in the SBOM", pkg, fields["Version"], arch)
		}
		if pkg == "iptables" && fields["Version"] != "1.8.9-2" {
			t.Errorf("iptables %s, want the pinned 1.8.9-2", fields["Version"])
		}
	}
	// Scanners match the packages to Debian's advisories by the release
	// os-release names.
	osr := map[string]string{}
	for line := range strings.Lines(string(files["etc/os-release"])) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			osr[k] = strings.Trim(v, `"`)
		}
	}
	if osr["ID"] != "debian" || osr["VERSION_ID"] != "12" {
		t.Errorf("/etc/os-release: ID %q, VERSION_ID %q; want debian, 12", osr["ID"], osr["VERSION_ID"])
	}
	if licences == 0 {
		t.Error("no copyright file refers to /usr/share/common-licenses: the check above checked nothing")
	}
	if debs < 5 {
		t.Errorf("%d Debian packages recorded, want iptables, its libraries, util-linux and glibc", debs)
	}
	info, err := buildinfo.Read(bytes.NewReader(files["install-cni"]))
	if err != nil {
		t.Fatal(err)
	}
	// The label is the version the binaries were stamped with (-trimpath
	// keeps -ldflags out of the build info: the stamp's bytes are looked
	// for; the e2e runs the amd64 one).
	for _, bin := range []string{"install-cni", "istio-cni-full"} {
		if !bytes.Contains(files[bin], []byte(version)) {
			t.Errorf("%s holds no %q: not stamped with the label's version", bin, version)
		}
	}
	if !purls["pkg:golang/stdlib@"+strings.TrimPrefix(info.GoVersion, "go")] {
		t.Errorf("Go %s not in the SBOM", info.GoVersion)
	}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		if !purls["pkg:golang/"+d.Path+"@"+d.Version] {
			t.Errorf("module %s@%s, linked into install-cni, not in the SBOM", d.Path, d.Version)
		}
		licensed := false
		for name := range files {
			licensed = licensed || strings.HasPrefix(name, "usr/share/doc/istio-cni/go-modules/"+d.Path+"@"+d.Version+"/")
		}
		if !licensed {
			t.Errorf("module %s@%s: no licence file in the image", d.Path, d.Version)
		}
	}
	return version
}

// commonLicense finds a copyright file's references to Debian's licence
// texts.
var commonLicense = regexp.MustCompile(`/usr/share/common-licenses/[A-Za-z0-9.+_-]+`)

// control parses a Debian control paragraph's single-line fields.
func control(data []byte) map[string]string {
	fields := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(k, " ") {
			fields[k] = strings.TrimSpace(v)
		}
	}
	return fields
}
