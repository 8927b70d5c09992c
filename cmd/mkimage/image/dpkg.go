package image

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Package is a Debian package whose files the image holds, as its
// control paragraph names it.
type Package struct {
	Name, Version, Arch string
	// Source is the source package and its version (Debian's archive
	// serves the source under these), the binary's when the control
	// paragraph names none.
	Source, SourceVersion string
}

// statusDir is where distroless images keep one control paragraph per
// package, and where image scanners look for them.
const statusDir = "/var/lib/dpkg/status.d"

// DebianPackages reads the packages build/debian/fetch.sh unpacked under
// root and returns them with the files that describe them in the image:
// each one's control paragraph (statusDir/NAME) and its copyright file
// (the licence the image's copy is distributed under).
func DebianPackages(root string) ([]Package, []File, error) {
	entries, err := os.ReadDir(root + statusDir)
	if err != nil {
		return nil, nil, fmt.Errorf("the unpacked packages' control paragraphs: %w", err)
	}
	var pkgs []Package
	var files []File
	for _, e := range entries {
		src := filepath.Join(root+statusDir, e.Name())
		p, err := readControl(src)
		if err != nil {
			return nil, nil, err
		}
		pkgs = append(pkgs, p)
		copyright := "/usr/share/doc/" + p.Name + "/copyright"
		if _, err := os.Stat(root + copyright); err != nil {
			return nil, nil, fmt.Errorf("package %s: its copyright file: %w", p.Name, err)
		}
		files = append(files,
			File{Path: path.Join(statusDir, e.Name()), Source: src, Mode: 0o644},
			File{Path: copyright, Source: root + copyright, Mode: 0o644})
	}
	if len(pkgs) == 0 {
		return nil, nil, fmt.Errorf("%s holds no packages", root+statusDir)
	}
	slices.SortFunc(pkgs, func(a, b Package) int { return strings.Compare(a.Name, b.Name) })
	return pkgs, files, nil
}

// readControl parses the fields of a control paragraph the SBOM needs.
func readControl(file string) (Package, error) {
	f, err := os.Open(file) // #nosec G304 -- the build's own inputs
	if err != nil {
		return Package{}, err
	}
	defer func() { _ = f.Close() }()
	fields := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && !strings.HasPrefix(k, " ") {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return Package{}, fmt.Errorf("%s: %w", file, err)
	}
	p := Package{Name: fields["Package"], Version: fields["Version"], Arch: fields["Architecture"]}
	if p.Name == "" || p.Version == "" || p.Arch == "" {
		return Package{}, fmt.Errorf("%s: want Package, Version and Architecture fields, have %q %q %q", file, p.Name, p.Version, p.Arch)
	}
	// "Source: name (version)" when the versions differ, "Source: name"
	// when they do not.
	p.Source, p.SourceVersion = p.Name, p.Version
	if src := fields["Source"]; src != "" {
		name, ver, _ := strings.Cut(src, " ")
		p.Source = name
		if ver = strings.Trim(ver, "()"); ver != "" {
			p.SourceVersion = ver
		}
	}
	return p, nil
}
