// Package sockfile keeps the file of a node agent's unix socket at a fixed
// path, for both of its servers (pkg/wire/lookups, pkg/wire/reports). The
// socket is bound under a temporary name and renamed into place at mode
// 0600, so the path is never missing and never has a wider mode; it is
// bound again when something removed the file (the run directory is a
// tmpfs a reboot empties, and the installer cleans it) or replaced it with
// a socket nobody listens on; and it is removed on close only while it is
// still ours, so a newer agent's socket stays.
package sockfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"time"
)

// File is a socket file as bound: what tells ours from a replacement.
type File struct {
	path    string
	network string
	info    fs.FileInfo
}

// Bind binds a socket at path with listen, which is given the name to
// listen on ("unix" or "unixgram" is network). A socket file already at
// path (left by an agent that exited) is replaced; any other kind of file
// is an error.
func Bind[S io.Closer](path, network string, listen func(name string) (S, error)) (S, File, error) {
	var none S
	if err := replaceable(path); err != nil {
		return none, File{}, err
	}
	tmp := path + ".new"
	if err := replaceable(tmp); err != nil {
		return none, File{}, err
	}
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return none, File{}, err
	}
	s, err := listen(tmp)
	if err != nil {
		return none, File{}, err
	}
	info, err := place(tmp, path)
	if err != nil {
		_ = s.Close()
		_ = os.Remove(tmp)
		return none, File{}, err
	}
	return s, File{path: path, network: network, info: info}, nil
}

// place sets the bound socket file's mode and renames it to path.
func place(tmp, path string) (fs.FileInfo, error) {
	if err := os.Chmod(tmp, 0o600); err != nil {
		return nil, err
	}
	info, err := os.Lstat(tmp)
	if err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, err
	}
	return info, nil
}

// replaceable says whether Bind may put a socket at path: nothing there,
// or a socket.
func replaceable(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("%s exists and is not a socket (%s); not replacing it", path, fi.Mode().Type())
	}
	return nil
}

// State is what is at a File's path now.
type State int

const (
	// Ours: the file Bind put there.
	Ours State = iota
	// Superseded: another socket that a process listens on (a newer
	// agent's); leave it.
	Superseded
	// Lost: nothing, or a file nobody listens on; bind again.
	Lost
)

// DialTimeout bounds asking whether a process listens at a path.
const DialTimeout = 50 * time.Millisecond

// State looks at the file at f's path.
func (f File) State() State {
	cur, err := os.Lstat(f.path)
	switch {
	case err == nil && os.SameFile(cur, f.info):
		return Ours
	case err == nil && cur.Mode().Type() == fs.ModeSocket && Listening(f.network, f.path):
		return Superseded
	}
	return Lost
}

// Remove removes the file at f's path if it is still ours.
func (f File) Remove() {
	if cur, err := os.Lstat(f.path); err == nil && os.SameFile(cur, f.info) {
		_ = os.Remove(f.path)
	}
}

// Listening says whether a process has a socket of network open at path.
func Listening(network, path string) bool {
	c, err := net.DialTimeout(network, path, DialTimeout)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
