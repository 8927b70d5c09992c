package image

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode"
)

// GoLicenses returns, for each module, the licence and notice files at the
// root of its copy in the module cache modcache, as files under dir in the
// image (dir/PATH@VERSION/LICENSE): the notices the modules' licences ask
// a binary distribution to carry. A module with none is an error naming
// it.
func GoLicenses(modcache, dir string, mods []GoModule) ([]File, error) {
	var files []File
	for _, m := range mods {
		src := filepath.Join(modcache, escapeModule(m.Path)+"@"+escapeModule(m.Version))
		entries, err := os.ReadDir(src)
		if err != nil {
			return nil, fmt.Errorf("module %s@%s: %w", m.Path, m.Version, err)
		}
		n := len(files)
		for _, e := range entries {
			upper := strings.ToUpper(e.Name())
			if !e.Type().IsRegular() {
				continue
			}
			for _, prefix := range []string{"LICENSE", "LICENCE", "COPYING", "NOTICE"} {
				if strings.HasPrefix(upper, prefix) {
					files = append(files, File{Path: path.Join(dir, m.Path+"@"+m.Version, e.Name()), Source: filepath.Join(src, e.Name()), Mode: 0o644})
					break
				}
			}
		}
		if len(files) == n {
			return nil, fmt.Errorf("module %s@%s: no LICENSE, COPYING or NOTICE file in %s", m.Path, m.Version, src)
		}
	}
	return files, nil
}

// escapeModule is the module cache's case encoding: an upper-case letter
// is "!" and its lower case.
func escapeModule(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
