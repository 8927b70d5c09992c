package image

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// GoModule is a module linked into one of the image's Go binaries.
type GoModule struct{ Path, Version string }

// GoModules reads the build info of the Go binaries among files: the Go
// release they were built with and every module they link (a replaced
// module as its replacement), each once, sorted; the main module is left
// out (the image is it). Files that are not Go binaries are skipped; none
// at all is an error.
func GoModules(files []File) (goVersion string, mods []GoModule, err error) {
	seen := map[GoModule]bool{}
	for _, f := range files {
		info, err := buildinfo.ReadFile(f.Source)
		if err != nil {
			continue // not a Go binary (iptables, a library, a text file)
		}
		goVersion = info.GoVersion
		for _, d := range info.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			m := GoModule{Path: d.Path, Version: d.Version}
			if !seen[m] {
				seen[m] = true
				mods = append(mods, m)
			}
		}
	}
	if goVersion == "" {
		return "", nil, errors.New("no Go binary among the image's files")
	}
	slices.SortFunc(mods, func(a, b GoModule) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), strings.Compare(a.Version, b.Version))
	})
	return goVersion, mods, nil
}

// SBOM describes an image: the name and version it is released as, its
// architecture, the Debian release its packages come from (distro as purl
// qualifiers name it: debian-12) and what it holds.
type SBOM struct {
	Name, Version, Arch, Distro string
	GoVersion                   string
	Debian                      []Package
	Go                          []GoModule
}

// SPDX renders the SBOM as an SPDX 2.3 JSON document, each package with
// its purl, which scanners (Trivy, Grype, Syft) match against advisories.
// Its creation time is the epoch, as everything in the image is, so equal
// inputs give equal bytes.
func (s SBOM) SPDX() ([]byte, error) {
	type ref struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	type pkg struct {
		Name          string `json:"name"`
		ID            string `json:"SPDXID"`
		Version       string `json:"versionInfo"`
		Supplier      string `json:"supplier,omitempty"`
		Download      string `json:"downloadLocation"`
		FilesAnalyzed bool   `json:"filesAnalyzed"`
		SourceInfo    string `json:"sourceInfo,omitempty"`
		Refs          []ref  `json:"externalRefs"`
	}
	type rel struct {
		From string `json:"spdxElementId"`
		Type string `json:"relationshipType"`
		To   string `json:"relatedSpdxElement"`
	}
	doc := struct {
		Version      string `json:"spdxVersion"`
		License      string `json:"dataLicense"`
		ID           string `json:"SPDXID"`
		Name         string `json:"name"`
		Namespace    string `json:"documentNamespace"`
		CreationInfo struct {
			Created  string   `json:"created"`
			Creators []string `json:"creators"`
		} `json:"creationInfo"`
		Packages      []pkg `json:"packages"`
		Relationships []rel `json:"relationships"`
	}{Version: "SPDX-2.3", License: "CC0-1.0", ID: "SPDXRef-DOCUMENT",
		Name:      fmt.Sprintf("%s-%s-%s", s.Name, s.Version, s.Arch),
		Namespace: fmt.Sprintf("https://spdx.org/spdxdocs/%s-%s-%s", s.Name, s.Version, s.Arch)}
	doc.CreationInfo.Created = epoch.Format("2006-01-02T15:04:05Z")
	doc.CreationInfo.Creators = []string{"Tool: istio-cni-mkimage"}
	root := "SPDXRef-image"
	// No purl for the image itself: an oci purl's version is the
	// manifest's digest, which this document, inside the image, cannot
	// know.
	doc.Packages = append(doc.Packages, pkg{Name: s.Name, ID: root, Version: s.Version, Download: "NOASSERTION", Refs: []ref{}})
	doc.Relationships = append(doc.Relationships, rel{"SPDXRef-DOCUMENT", "DESCRIBES", root})
	add := func(p pkg) {
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, rel{root, "CONTAINS", p.ID})
	}
	for _, d := range s.Debian {
		purl := fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s&distro=%s", d.Name, purlEscape(d.Version), d.Arch, s.Distro)
		// As Syft writes it: the source's version too when the binary's
		// differs (a binNMU: libselinux1 3.4-1+b6 from libselinux 3.4-1).
		switch {
		case d.SourceVersion != d.Version:
			purl += "&upstream=" + d.Source + "%40" + purlEscape(d.SourceVersion)
		case d.Source != d.Name:
			purl += "&upstream=" + d.Source
		}
		add(pkg{Name: d.Name, ID: spdxID("deb-" + d.Name), Version: d.Version, Supplier: "Organization: Debian", Download: "NOASSERTION",
			SourceInfo: fmt.Sprintf("built from Debian source package %s %s", d.Source, d.SourceVersion),
			Refs:       []ref{{"PACKAGE-MANAGER", "purl", purl}}})
	}
	add(pkg{Name: "stdlib", ID: spdxID("go-stdlib"), Version: s.GoVersion, Download: "NOASSERTION",
		Refs: []ref{{"PACKAGE-MANAGER", "purl", "pkg:golang/stdlib@" + strings.TrimPrefix(s.GoVersion, "go")}}})
	for _, m := range s.Go {
		add(pkg{Name: m.Path, ID: spdxID("go-" + m.Path + "-" + m.Version), Version: m.Version, Download: "NOASSERTION",
			Refs: []ref{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + m.Path + "@" + purlEscape(m.Version)}}})
	}
	// The namespace names this document alone: the same name and version
	// (two -dirty builds) with other contents get another.
	content, err := encode(doc)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(content)
	doc.Namespace += "-" + hex.EncodeToString(sum[:8])
	return encode(doc)
}

// encode writes v indented, purls' "&" as it is (not \u0026).
func encode(v any) ([]byte, error) {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// purlEscape percent-encodes what a purl's version may not hold as is.
func purlEscape(v string) string {
	return strings.NewReplacer("+", "%2B", ":", "%3A", "~", "%7E").Replace(v)
}

// spdxID makes an SPDX identifier: letters, digits, "." and "-" only.
func spdxID(s string) string {
	return "SPDXRef-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, s)
}
