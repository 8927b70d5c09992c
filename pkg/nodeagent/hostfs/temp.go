package hostfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// tempPrefixMax bounds the part of the target name copied into a temp name,
// so the temp name stays under NAME_MAX (255).
const tempPrefixMax = 200

// tempName is hidden (leading ".") and ends in ".tmp", so neither dotfile-
// skipping runtimes nor "*.conf"/"*.conflist" globs pick it up.
func tempName(name string) (string, error) {
	if len(name) > tempPrefixMax {
		name = name[:tempPrefixMax]
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "." + name + "." + hex.EncodeToString(b[:]) + ".tmp", nil
}

// writeTemp writes c into a new temp file next to name, sets mode and
// syncs it, and returns the temp name. On error the temp file is removed.
//
// ForkLock is held while the temp file is open for writing. Otherwise a
// child forked by this process meanwhile inherits the writable descriptor
// until its own exec closes it, and exec of the renamed file (by that child
// or any other) fails with ETXTBSY (golang/go#22315).
func (d *Dir) writeTemp(name string, mode fs.FileMode, c content) (tmp string, err error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()

	f, tmp, err := d.createTemp(name)
	if err != nil {
		return "", err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("closing temp file %s: %w", d.join(tmp), cerr)
		}
		if err != nil {
			_ = d.root.Remove(tmp)
		}
	}()
	r, err := c.open()
	if err != nil {
		return "", err
	}
	n, err := f.ReadFrom(r)
	if err != nil {
		return "", fmt.Errorf("writing temp file %s: %w", d.join(tmp), err)
	}
	if n != c.size {
		return "", fmt.Errorf("source changed size while copying: %d bytes, expected %d", n, c.size)
	}
	// fchmod, not the create mode: the umask must not change the result.
	if err := f.Chmod(mode); err != nil {
		return "", fmt.Errorf("chmod temp file %s: %w", d.join(tmp), err)
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("syncing temp file %s: %w", d.join(tmp), err)
	}
	return tmp, nil
}

// createTemp creates a fresh temp file; O_EXCL never opens an existing file
// or follows a symlink, and a name collision retries with another name.
func (d *Dir) createTemp(name string) (*os.File, string, error) {
	for range 5 {
		tmp, err := tempName(name)
		if err != nil {
			return nil, "", err
		}
		f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("creating temp file in %s: %w", d.path, err)
		}
		return f, tmp, nil
	}
	return nil, "", fmt.Errorf("creating temp file in %s: names kept colliding", d.path)
}

// RemoveTemps removes the temp files that writes of names matching target
// left behind when their process died between creating and renaming one.
// Call it before any write is under way (at start-up).
func (d *Dir) RemoveTemps(target func(name string) bool) error {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if name, ok := tempTarget(e.Name()); ok && target(name) && e.Type().IsRegular() {
			errs = append(errs, d.root.Remove(e.Name()))
		}
	}
	return errors.Join(errs...)
}

// tempTarget reverses tempName: "." + name + "." + 16 hex digits + ".tmp"
// gives name (cut to tempPrefixMax).
func tempTarget(file string) (string, bool) {
	const suffix = 1 + 16 + 4 // ".<16 hex>.tmp"
	if len(file) <= 1+suffix || file[0] != '.' || file[len(file)-4:] != ".tmp" || file[len(file)-suffix] != '.' {
		return "", false
	}
	if _, err := hex.DecodeString(file[len(file)-suffix+1 : len(file)-4]); err != nil {
		return "", false
	}
	return file[1 : len(file)-suffix], true
}
