package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteIndex writes the images in archives (docker-archive tarballs, one
// per architecture, as WriteArchive writes them) as one OCI image index in
// an OCI image layout, tarred at path (atomically), the index named tag
// (org.opencontainers.image.ref.name). A registry takes it with `skopeo
// copy --all oci-archive:` or, unpacked, `crane push DIR`; `ctr images import`
// reads it too.
func WriteIndex(path, tag string, archives []string) error {
	if _, err := ParseTag(tag); err != nil {
		return err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]string{}
	for i, a := range archives {
		img, err := tarball.ImageFromPath(a, nil)
		if err != nil {
			return fmt.Errorf("archives[%d] %s: %w", i, a, err)
		}
		oci, cfg, err := asOCI(img)
		if err != nil {
			return fmt.Errorf("archives[%d] %s: %w", i, a, err)
		}
		if prev, ok := seen[cfg.Architecture]; ok {
			return fmt.Errorf("%w: archives[%d] %s: %s/%s already in %s", ErrInvalid, i, a, cfg.OS, cfg.Architecture, prev)
		}
		seen[cfg.Architecture] = a
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: oci,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture}}})
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".oci-layout-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	if err := writeAtomic(path, func(w io.Writer) error { return tarDir(w, dir) }); err != nil {
		return fmt.Errorf("writing image index %s: %w", path, err)
	}
	return nil
}

// asOCI rebuilds a docker-archive image with OCI media types (the same
// layers and config), as an OCI index wants its manifests.
func asOCI(img v1.Image) (v1.Image, *v1.ConfigFile, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, nil, err
	}
	out := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, l := range layers {
		nl, err := tarball.LayerFromOpener(l.Uncompressed, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, nil, err
		}
		if out, err = mutate.AppendLayers(out, nl); err != nil {
			return nil, nil, err
		}
	}
	out, err = mutate.ConfigFile(out, cfg)
	return out, cfg, err
}

// tarDir tars dir's tree in path order, owner root, mtime epoch.
func tarDir(w io.Writer, dir string) error {
	var paths []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			paths = append(paths, p)
		}
		return err
	}); err != nil {
		return err
	}
	slices.Sort(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.IsDir() {
			if err := tw.WriteHeader(header(rel+"/", tar.TypeDir, 0o755, 0)); err != nil {
				return err
			}
			continue
		}
		if err := addFile(tw, 0, File{Path: rel, Source: p, Mode: 0o644}); err != nil {
			return err
		}
	}
	return tw.Close()
}

// ReadIndex unpacks an OCI layout tarball WriteIndex wrote into dir and
// returns the image index it names, with that name.
func ReadIndex(tarball, dir string) (v1.ImageIndex, string, error) {
	if err := untar(tarball, dir); err != nil {
		return nil, "", fmt.Errorf("unpacking %s: %w", tarball, err)
	}
	outer, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, "", err
	}
	m, err := outer.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
		return nil, "", fmt.Errorf("%s: index.json holds %d entries, want one OCI image index", tarball, len(m.Manifests))
	}
	idx, err := outer.ImageIndex(m.Manifests[0].Digest)
	return idx, m.Manifests[0].Annotations["org.opencontainers.image.ref.name"], err
}

// untar unpacks a tarball of directories and regular files into dir.
func untar(tarball, dir string) error {
	f, err := os.Open(tarball) // #nosec G304 -- the build's own output
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	return eachEntry(f, func(h *tar.Header, r io.Reader) error {
		dst := filepath.Join(dir, filepath.Clean("/"+h.Name)) // #nosec G305 -- cleaned from the root: never above dir
		switch h.Typeflag {
		case tar.TypeDir:
			return os.MkdirAll(dst, 0o750)
		case tar.TypeReg:
			return writeFile(dst, r)
		}
		return fmt.Errorf("%s: want a directory or a regular file", h.Name)
	})
}

// eachEntry calls fn for each entry of the tar stream r, with the entry's
// contents, until the end or an error.
func eachEntry(r io.Reader, fn func(*tar.Header, io.Reader) error) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(h, tr); err != nil {
			return err
		}
	}
}

func writeFile(dst string, r io.Reader) error {
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600) // #nosec G304 -- under dir
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r) // #nosec G110 -- the build's own output
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Files reads every regular file of img's layers, by path (no leading
// "/"), as a registry client or a scanner sees them.
func Files(img v1.Image) (map[string][]byte, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, l := range layers {
		if err := layerFiles(l, files); err != nil {
			return nil, err
		}
	}
	return files, nil
}

func layerFiles(l v1.Layer, files map[string][]byte) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	return eachEntry(rc, func(h *tar.Header, r io.Reader) (err error) {
		if h.Typeflag == tar.TypeReg {
			files[h.Name], err = io.ReadAll(r) // #nosec G110 -- the build's own image
		}
		return err
	})
}
