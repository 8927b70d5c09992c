package hostfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// content is what a file should hold. open is called once to compare with
// the existing file and again to write; each call starts from the beginning.
type content struct {
	size int64
	open func() (io.Reader, error)
}

// WriteFile makes name hold data with mode, atomically: readers see either
// the old or the new file, never a partial one. If name already is a regular
// file owned by this process's user with the same mode and content, nothing
// is written and changed is false. A symlink at name is replaced by the file.
func (d *Dir) WriteFile(name string, data []byte, mode fs.FileMode) (changed bool, err error) {
	c := content{
		size: int64(len(data)),
		open: func() (io.Reader, error) { return bytes.NewReader(data), nil },
	}
	changed, err = d.write(name, mode, c)
	if err != nil {
		return false, fmt.Errorf("writing %s: %w", d.join(name), err)
	}
	return changed, nil
}

// CopyFile is WriteFile with the content streamed from the file src (outside
// d, e.g. the plugin binary in the image). An unchanged copy is detected by
// comparing the two files, without writing.
func (d *Dir) CopyFile(name, src string, mode fs.FileMode) (changed bool, err error) {
	changed, err = d.copyFile(name, src, mode)
	if err != nil {
		return false, fmt.Errorf("copying %s to %s: %w", src, d.join(name), err)
	}
	return changed, nil
}

func (d *Dir) copyFile(name, src string, mode fs.FileMode) (bool, error) {
	f, err := os.Open(src) // #nosec G304 -- the source is the installer's own image file
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() {
		return false, fmt.Errorf("source is not a regular file (%s)", fi.Mode().Type())
	}
	c := content{
		size: fi.Size(),
		open: func() (io.Reader, error) {
			_, err := f.Seek(0, io.SeekStart)
			return f, err
		},
	}
	return d.write(name, mode, c)
}

func (d *Dir) write(name string, mode fs.FileMode, c content) (bool, error) {
	if err := d.checkName(name); err != nil {
		return false, err
	}
	if mode&^(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
		// Also catches the Unix literal 0o4755: Go spells setuid fs.ModeSetuid.
		return false, fmt.Errorf("mode %#o (%v): only permission bits and fs.ModeSetuid, fs.ModeSetgid, fs.ModeSticky are allowed", uint32(mode), mode)
	}
	same, err := d.unchanged(name, mode, c)
	if err != nil || same {
		return false, err
	}
	tmp, err := d.writeTemp(name, mode, c)
	if err != nil {
		return false, err
	}
	// rename(2) replaces the entry itself: a symlink at name is not followed.
	if err := d.root.Rename(tmp, name); err != nil {
		_ = d.root.Remove(tmp)
		return false, err
	}
	return true, d.syncDir()
}

// unchanged reports whether name already is a regular file owned by us with
// mode and the content c. A file that cannot be read counts as changed, so it
// is replaced; only errors reading c are returned.
func (d *Dir) unchanged(name string, mode fs.FileMode, c content) (bool, error) {
	fi, err := d.root.Lstat(name)
	if err != nil || fi.Mode() != mode || fi.Size() != c.size || !ownedByUs(fi) {
		return false, nil
	}
	f, err := d.openRegular(name)
	if err != nil {
		return false, nil // unreadable or replaced meanwhile: rewrite it
	}
	defer func() { _ = f.Close() }()
	want, err := c.open()
	if err != nil {
		return false, err
	}
	return sameBytes(f, want)
}

// ownedByUs: a file someone else owns is rewritten even if its bytes match,
// so its owner cannot change what the kubelet later runs or reads.
func ownedByUs(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// sameBytes compares have (the existing file) with want chunk by chunk.
// Read errors on have count as a difference; errors on want are returned.
func sameBytes(have, want io.Reader) (bool, error) {
	const chunk = 64 << 10
	hb, wb := make([]byte, chunk), make([]byte, chunk)
	for {
		wn, werr := io.ReadFull(want, wb)
		end := errors.Is(werr, io.EOF) || errors.Is(werr, io.ErrUnexpectedEOF)
		if werr != nil && !end {
			return false, werr
		}
		if _, err := io.ReadFull(have, hb[:wn]); err != nil || !bytes.Equal(hb[:wn], wb[:wn]) {
			return false, nil
		}
		if end {
			n, _ := have.Read(hb[:1])
			return n == 0, nil
		}
	}
}

func (d *Dir) syncDir() error {
	f, err := d.root.Open(".")
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("syncing directory %s: %w", d.path, err)
	}
	return nil
}
