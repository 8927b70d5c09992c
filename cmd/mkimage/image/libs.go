package image

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// LibraryDirs are where a dynamic binary's libraries are looked for, in the
// loader's default order on Debian-family hosts for the given multiarch
// triplet (x86_64-linux-gnu, aarch64-linux-gnu).
func LibraryDirs(triplet string) []string {
	return []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib", "/usr/lib"}
}

// WithLibraries returns files plus every shared library and program
// interpreter their ELF files need, transitively, each at the path the
// loader in the image will look for it: the interpreter at its PT_INTERP
// path and each DT_NEEDED library in the first of dirs (after the file's
// own DT_RUNPATH) that holds it. The image has no ld.so.cache, so these are
// the places the loader searches. Files that are not ELF, or are static,
// add nothing; a path already in files is not added twice. An error names
// the file and the library it could not find.
//
// The libraries come from root, a tree unpacked for the image's
// architecture (build/debian/fetch.sh), at root+path; root "" is this
// machine's own files.
func WithLibraries(files []File, root string, dirs []string) ([]File, error) {
	out := slices.Clone(files)
	have := map[string]bool{}
	for _, f := range files {
		have[f.Path] = true
	}
	type item struct {
		field, source string
	}
	queue := make([]item, 0, len(files))
	for i, f := range files {
		queue = append(queue, item{fmt.Sprintf("files[%d] (%s)", i, f.Source), f.Source})
	}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		interp, needed, runpath, err := dynamicInfo(it.source)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", it.field, err)
		}
		var add []string
		if interp != "" {
			add = append(add, interp)
		}
		for _, lib := range needed {
			p, err := findLibrary(root, lib, append(runpath, dirs...))
			if err != nil {
				return nil, fmt.Errorf("%s needs %w", it.field, err)
			}
			add = append(add, p)
		}
		for _, p := range add {
			if have[p] {
				continue
			}
			have[p] = true
			st, err := os.Stat(root + p)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", it.field, err)
			}
			out = append(out, File{Path: p, Source: root + p, Mode: st.Mode().Perm()})
			queue = append(queue, item{p + " (a library of " + it.field + ")", root + p})
		}
	}
	return out, nil
}

// dynamicInfo reads an ELF file's interpreter, needed libraries and run
// path; a file that is not ELF gives none.
func dynamicInfo(file string) (interp string, needed, runpath []string, err error) {
	r, err := os.Open(file) // #nosec G304 -- the build's own inputs
	if err != nil {
		return "", nil, nil, err
	}
	magic := make([]byte, len(elf.ELFMAG))
	_, _ = io.ReadFull(r, magic) // short: not ELF
	_ = r.Close()
	if string(magic) != elf.ELFMAG {
		return "", nil, nil, nil
	}
	f, err := elf.Open(file)
	if err != nil {
		return "", nil, nil, err
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "", nil, nil, fmt.Errorf("reading PT_INTERP: %w", err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if f.Section(".dynamic") == nil {
		return interp, nil, nil, nil
	}
	if needed, err = f.ImportedLibraries(); err != nil {
		return "", nil, nil, fmt.Errorf("reading DT_NEEDED: %w", err)
	}
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, err := f.DynString(tag)
		if err != nil {
			return "", nil, nil, fmt.Errorf("reading %s: %w", tag, err)
		}
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				// $ORIGIN and friends would need the loader's expansion;
				// none of the binaries shipped uses them.
				if path.IsAbs(d) && !strings.Contains(d, "$") {
					runpath = append(runpath, d)
				}
			}
		}
	}
	return interp, needed, runpath, nil
}

// findLibrary returns the image path of the first dirs/name under root.
func findLibrary(root, name string, dirs []string) (string, error) {
	for _, d := range dirs {
		p := path.Join(d, name)
		if st, err := os.Stat(root + p); err == nil && st.Mode().IsRegular() {
			return p, nil
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s: %w", name, err)
		}
	}
	if root != "" {
		return "", fmt.Errorf("%s: not found in %s under %s (a package missing from the list fetched?)", name, strings.Join(dirs, ", "), root)
	}
	return "", fmt.Errorf("%s: not found in %s", name, strings.Join(dirs, ", "))
}
