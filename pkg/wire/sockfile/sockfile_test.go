package sockfile

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func listenUnix(name string) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err == nil {
		ln.SetUnlinkOnClose(false)
	}
	return ln, err
}

// Bind puts a 0600 socket at the path, replacing a stale socket but no
// other kind of file; State tells ours, a newer listener's and a lost
// file apart; Remove removes only ours.
func TestBindStateRemove(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pods.sock")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Bind(path, "unix", listenUnix); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Bind over a regular file: %v, want a refusal", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	ln, file, err := Bind(path, "unix", listenUnix)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("the socket file: %v, %v; want a 0600 socket", fi, err)
	}
	if file.State() != Ours {
		t.Errorf("State = %v right after Bind, want Ours", file.State())
	}

	// A newer agent binds the path: ours is superseded, and Remove
	// leaves the newer socket.
	newer, newerFile, err := Bind(path, "unix", listenUnix)
	if err != nil {
		t.Fatal(err)
	}
	if file.State() != Superseded {
		t.Errorf("State = %v with a newer listener, want Superseded", file.State())
	}
	file.Remove()
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("Remove took the newer agent's socket: %v", err)
	}
	// The newer one goes, leaving its file: lost, for the first to bind again.
	_ = newer.Close()
	if file.State() != Lost {
		t.Errorf("State = %v with nobody listening, want Lost", file.State())
	}
	newerFile.Remove()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("Remove left its own socket: %v", err)
	}
	if file.State() != Lost {
		t.Errorf("State = %v with no file, want Lost", file.State())
	}
	_ = ln.Close()
}
