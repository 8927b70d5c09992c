package image

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// validate checks what can be checked without reading the sources; errors
// name the field as files[i].path, entrypoint[0], ...
func (s Spec) validate() error {
	if len(s.Files) == 0 {
		return fmt.Errorf("%w: files: want at least one file", ErrInvalid)
	}
	index := make(map[string]int, len(s.Files))
	for i, f := range s.Files {
		if err := f.validate(i); err != nil {
			return err
		}
		if j, ok := index[f.Path]; ok {
			return fmt.Errorf("%w: files[%d].path %q: already files[%d].path", ErrInvalid, i, f.Path, j)
		}
		index[f.Path] = i
	}
	linked := make(map[string]int, len(s.Links))
	for i, l := range s.Links {
		if err := l.validate(i); err != nil {
			return err
		}
		if j, ok := index[l.Path]; ok {
			return fmt.Errorf("%w: links[%d].path %q: already files[%d].path", ErrInvalid, i, l.Path, j)
		}
		if j, ok := linked[l.Path]; ok {
			return fmt.Errorf("%w: links[%d].path %q: already links[%d].path", ErrInvalid, i, l.Path, j)
		}
		linked[l.Path] = i
	}
	// Neither a file nor a link can also be a parent directory.
	for i, f := range s.Files {
		if err := noEntryAbove(fmt.Sprintf("files[%d]", i), f.Path, index, linked); err != nil {
			return err
		}
	}
	for i, l := range s.Links {
		if err := noEntryAbove(fmt.Sprintf("links[%d]", i), l.Path, index, linked); err != nil {
			return err
		}
	}
	return s.validateEntrypoint(index)
}

func noEntryAbove(field, p string, files, links map[string]int) error {
	for _, d := range parents(p) {
		if j, ok := files[d]; ok {
			return fmt.Errorf("%w: %s.path %q: its parent directory is files[%d].path", ErrInvalid, field, p, j)
		}
		if j, ok := links[d]; ok {
			return fmt.Errorf("%w: %s.path %q: its parent directory is links[%d].path", ErrInvalid, field, p, j)
		}
	}
	return nil
}

func (l Link) validate(i int) error {
	switch {
	case !path.IsAbs(l.Path) || path.Clean(l.Path) != l.Path || l.Path == "/":
		return fmt.Errorf("%w: links[%d].path %q: want a clean absolute path below /", ErrInvalid, i, l.Path)
	case l.Target == "":
		return fmt.Errorf("%w: links[%d].target: want what the link points at, have none", ErrInvalid, i)
	}
	return nil
}

func (f File) validate(i int) error {
	switch {
	case !path.IsAbs(f.Path):
		return fmt.Errorf("%w: files[%d].path %q: want an absolute path", ErrInvalid, i, f.Path)
	case path.Clean(f.Path) != f.Path || f.Path == "/":
		return fmt.Errorf("%w: files[%d].path %q: want a clean path below / (no //, ., .. or trailing /)", ErrInvalid, i, f.Path)
	case f.Source == "":
		return fmt.Errorf("%w: files[%d].source: want a host file, have none", ErrInvalid, i)
	case f.Mode&^fs.ModePerm != 0:
		return fmt.Errorf("%w: files[%d].mode %#o: want permission bits only (0 to 0777)", ErrInvalid, i, uint32(f.Mode))
	}
	return nil
}

func (s Spec) validateEntrypoint(index map[string]int) error {
	if len(s.Entrypoint) == 0 {
		return fmt.Errorf("%w: entrypoint: want the program to run, have none", ErrInvalid)
	}
	j, ok := index[s.Entrypoint[0]]
	if !ok {
		paths := make([]string, 0, len(index))
		for p := range index {
			paths = append(paths, p)
		}
		slices.Sort(paths)
		return fmt.Errorf("%w: entrypoint[0] %q: want one of the files (%s), the image holds nothing else", ErrInvalid, s.Entrypoint[0], strings.Join(paths, ", "))
	}
	if m := s.Files[j].Mode; m&0o111 == 0 {
		return fmt.Errorf("%w: entrypoint[0] %q: files[%d].mode %#o: want an execute bit", ErrInvalid, s.Entrypoint[0], j, uint32(m))
	}
	return nil
}

// parents lists the directories above p, outermost first, without "/":
// /a/b/c gives /a, /a/b.
func parents(p string) []string {
	var ds []string
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		ds = append(ds, d)
	}
	slices.Reverse(ds)
	return ds
}
