package install

import (
	"errors"
	"io/fs"
	"path/filepath"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/nodeagent/hostfs"
)

// ReadConfDir reads a CNI config directory into the value pkg/chain
// decides from: each file the runtime would read, in the runtime's order,
// with its content when it is a regular file of at most chain.MaxConfigSize
// (read through no symlink), and each subdirectory's .conf files (a
// network's extra plugins). One read serves a whole reconcile. A missing
// directory holds nothing, as to the runtime.
func ReadConfDir(path string) (chain.Dir, error) {
	d, err := hostfs.OpenDir(path)
	if errors.Is(err, fs.ErrNotExist) {
		return chain.Dir{Path: path}, nil
	}
	if err != nil {
		return chain.Dir{}, err
	}
	defer func() { _ = d.Close() }()
	return readConfDir(d)
}

func readConfDir(d *hostfs.Dir) (chain.Dir, error) {
	out := chain.Dir{Path: d.Path()}
	entries, err := d.Entries()
	if err != nil {
		return out, err
	}
	for _, e := range entries {
		switch {
		case e.IsDir():
			if confs := pluginConfs(d, e.Name()); len(confs) > 0 {
				if out.PluginConfs == nil {
					out.PluginConfs = map[string][]chain.File{}
				}
				out.PluginConfs[e.Name()] = confs
			}
		case e.Type()&fs.ModeSymlink != 0 && !chain.IsConfigName(e.Name()):
			// Perhaps a network's plugin directory, which libcni follows
			// and the installer does not: named, never read.
			if out.PluginConfs == nil {
				out.PluginConfs = map[string][]chain.File{}
			}
			out.PluginConfs[e.Name()] = []chain.File{{Name: e.Name(), Mode: fs.ModeSymlink}}
		case chain.IsConfigName(e.Name()):
			if f, ok := readConfFile(d, e.Name()); ok {
				out.Files = append(out.Files, f)
			}
		}
	}
	return out, nil
}

// readConfFile describes one entry; ok=false when it went meanwhile.
func readConfFile(d *hostfs.Dir, name string) (chain.File, bool) {
	fi, err := d.Lstat(name)
	if err != nil {
		return chain.File{}, false
	}
	f := chain.File{Name: name, Mode: fi.Mode(), Size: fi.Size()}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		f.LinkToRegular = d.LinksToRegular(name)
	case fi.Mode().IsRegular() && fi.Size() <= chain.MaxConfigSize:
		if data, err := d.ReadFile(name); err == nil {
			f.Data, f.Size = data, int64(len(data))
		} else if errors.Is(err, hostfs.ErrTooLarge) {
			f.Size = chain.MaxConfigSize + 1 // grew meanwhile
		} else {
			f.ReadErr = err.Error()
		}
	}
	return f, true
}

// pluginConfs reads a subdirectory's .conf files (libcni's ConfFiles with
// the .conf extension); a file that cannot be read has no Data.
func pluginConfs(d *hostfs.Dir, name string) []chain.File {
	sub, err := d.Sub(name)
	if err != nil {
		return nil
	}
	defer func() { _ = sub.Close() }()
	entries, err := sub.Entries()
	if err != nil {
		return nil
	}
	var out []chain.File
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".conf" {
			continue
		}
		if f, ok := readConfFile(sub, e.Name()); ok {
			out = append(out, f)
		}
	}
	return out
}
