package image

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ParseTag parses an image reference such as istio-cni/install-cni:0.1.0;
// the tag defaults to "latest".
func ParseTag(s string) (name.Tag, error) {
	t, err := name.NewTag(s, name.WeakValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("tag %q: want [HOST[:PORT]/]REPOSITORY[:TAG], repository in lowercase: %w", s, err)
	}
	return t, nil
}

// WriteArchive writes img as a docker-archive tarball at path, named by
// every tag (they land in manifest.json's RepoTags, as written). The file
// is replaced atomically: a reader sees the old archive or the new one.
// With several tags their order in manifest.json may vary between runs;
// the image does not.
func WriteArchive(path string, img v1.Image, tags ...string) error {
	if len(tags) == 0 {
		return fmt.Errorf("writing image archive %s: tags: want at least one, have none", path)
	}
	refs := make(map[name.Reference]v1.Image, len(tags))
	for i, s := range tags {
		t, err := ParseTag(s)
		if err != nil {
			return fmt.Errorf("writing image archive %s: tags[%d]: %w", path, i, err)
		}
		refs[t] = img
	}
	err := writeAtomic(path, func(w io.Writer) error { return tarball.MultiRefWrite(refs, w) })
	if err != nil {
		return fmt.Errorf("writing image archive %s: %w", path, err)
	}
	return nil
}

// writeAtomic writes a temp file next to path (same file system, so the
// rename is atomic), syncs it and renames it over path. On error the temp
// file is removed.
func writeAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	err = fill(f, write)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

func fill(f *os.File, write func(io.Writer) error) error {
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	// CreateTemp makes 0600; the archive is read by other tools and users.
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	return f.Sync()
}
