package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// buildLayer makes the layer tar in memory (the files are a few binaries
// and their libraries): entries sorted by path, each parent directory once
// before its first entry, owner root, mtime epoch, so equal inputs give
// equal bytes. Index i < len(files) is files[i], else links[i-len(files)].
func buildLayer(files []File, links []Link) (v1.Layer, error) {
	pathOf := func(i int) string {
		if i < len(files) {
			return files[i].Path
		}
		return links[i-len(files)].Path
	}
	order := make([]int, len(files)+len(links))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(pathOf(a), pathOf(b)) })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, i := range order {
		for _, d := range parents(pathOf(i)) {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(header(d+"/", tar.TypeDir, 0o755, 0)); err != nil {
				return nil, fmt.Errorf("building layer: %w", err)
			}
		}
		if i >= len(files) {
			l := links[i-len(files)]
			h := header(l.Path, tar.TypeSymlink, 0o777, 0)
			h.Linkname = l.Target
			if err := tw.WriteHeader(h); err != nil {
				return nil, fmt.Errorf("links[%d]: %w", i-len(files), err)
			}
			continue
		}
		if err := addFile(tw, i, files[i]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("building layer: %w", err)
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("building layer: %w", err)
	}
	return layer, nil
}

// addFile copies f.Source into tw as f.Path; the size comes from the open
// file, so a source that changes while copied fails rather than corrupting
// the tar.
func addFile(tw *tar.Writer, i int, f File) error {
	src, err := os.Open(f.Source)
	if err != nil {
		return fmt.Errorf("files[%d].source: %w", i, err)
	}
	defer func() { _ = src.Close() }()
	fi, err := src.Stat()
	if err != nil {
		return fmt.Errorf("files[%d].source: %w", i, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: files[%d].source %q: want a regular file, have %s", ErrInvalid, i, f.Source, kind(fi.Mode()))
	}
	if err := tw.WriteHeader(header(f.Path, tar.TypeReg, f.Mode, fi.Size())); err != nil {
		return fmt.Errorf("files[%d]: %w", i, err)
	}
	if _, err := io.Copy(tw, src); err != nil {
		return fmt.Errorf("files[%d].source %q: %w", i, f.Source, err)
	}
	return nil
}

// header names entries without the leading "/", as image layers do.
func header(p string, typ byte, mode os.FileMode, size int64) *tar.Header {
	return &tar.Header{
		Typeflag: typ,
		Name:     strings.TrimPrefix(p, "/"),
		Mode:     int64(mode),
		Size:     size,
		ModTime:  epoch,
	}
}

func kind(m os.FileMode) string {
	if m.IsDir() {
		return "a directory"
	}
	return "file type " + m.Type().String()
}
