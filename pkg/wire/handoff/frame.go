package handoff

import (
	"encoding/binary"
	"errors"
	"strconv"
)

// A hand-off travels as one binary frame each way (version 1 was JSON):
// stdin, most of a request, goes as bytes rather than base64, and the
// frame is frozen by version in testdata/formats. A frame is Magic, the version
// (uint16), then fixed fields and length-prefixed byte strings (uint32),
// all big-endian. A lookup is a JSON line, so Magic tells them apart on
// the agent's socket; an agent from before reads a frame as a bad lookup
// and closes, which the shim takes as "run the plugin".
//
// A frame carries the oldest version that says all it holds, and a reader
// takes every version from oldestVersion to its own: while a rollout or a
// rollback mixes two builds on a node, the shim of one and the agent of
// the other still hand off whatever the older one can run. A response, and
// a request for 1.8.9's layout with no legacy family, are version 2's.

// Magic opens every hand-off frame.
const Magic = "ICNI"

var errShort = errors.New("truncated")

// MarshalBinary is the request's frame.
func (r Request) MarshalBinary() ([]byte, error) {
	version := uint16(Version)
	if r.Release == v2Release && len(r.Legacy) == 0 {
		version = oldestVersion
	}
	b := header(version, len(r.ContainerID)+len(r.Netns)+len(r.IfName)+len(r.Args)+len(r.Path)+len(r.Stdin)+64)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Deadline)) // #nosec G115 -- Unix nanoseconds, read back as int64
	for _, s := range []string{r.ContainerID, r.Netns, r.IfName, r.Args, r.Path} {
		b = appendBytes(b, []byte(s))
	}
	b = appendFamilies(b, r.Netlink)
	if version >= 3 {
		b = appendFamilies(b, r.Legacy)
		b = appendBytes(b, []byte(r.Release))
	}
	b = appendBytes(b, r.Stdin)
	if len(b) > MaxRequest {
		return nil, errors.New("the request is " + strconv.Itoa(len(b)) + " bytes, over " + strconv.Itoa(MaxRequest))
	}
	return b, nil
}

// UnmarshalBinary reads a request's frame; another version is an error
// that says so.
func (r *Request) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	version := d.header()
	deadline := d.u64()
	fields := []*string{&r.ContainerID, &r.Netns, &r.IfName, &r.Args, &r.Path}
	for _, f := range fields {
		*f = string(d.bytes())
	}
	r.Netlink = d.families()
	r.Legacy, r.Release = nil, v2Release
	if version >= 3 {
		r.Legacy = d.families()
		r.Release = string(d.bytes())
	}
	r.Stdin = d.bytes()
	r.Deadline = int64(deadline) // #nosec G115 -- written from an int64
	return d.end("request")
}

// MarshalBinary is the response's frame.
func (r Response) MarshalBinary() ([]byte, error) {
	b := header(oldestVersion, len(r.HandBack)+len(r.Stdout)+len(r.Stderr)+16)
	done := byte(0)
	if r.Done {
		done = 1
	}
	b = append(b, done)
	b = appendBytes(b, []byte(r.HandBack))
	b = appendBytes(b, r.Stdout)
	b = appendBytes(b, r.Stderr)
	if len(b) > MaxResponse {
		return nil, errors.New("the answer is " + strconv.Itoa(len(b)) + " bytes, over " + strconv.Itoa(MaxResponse))
	}
	return b, nil
}

// UnmarshalBinary reads a response's frame.
func (r *Response) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	d.header()
	switch done := d.byte(); {
	case d.err != nil:
	case done > 1:
		d.fail(errors.New("done is " + utoa(uint32(done))))
	default:
		r.Done = done == 1
	}
	r.HandBack = string(d.bytes())
	r.Stdout = d.bytes()
	r.Stderr = d.bytes()
	return d.end("answer")
}

// header starts a frame of a version with room for size more bytes.
func header(version uint16, size int) []byte {
	b := make([]byte, 0, len(Magic)+2+size)
	b = append(b, Magic...)
	return binary.BigEndian.AppendUint16(b, version)
}

// appendFamilies appends a list of family names.
func appendFamilies(b []byte, families []string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(families))) // #nosec G115 -- at most two families
	for _, f := range families {
		b = appendBytes(b, []byte(f))
	}
	return b
}

func appendBytes(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(v))) // #nosec G115 -- frames are at most MaxRequest
	return append(b, v...)
}

// decoder reads a frame; the first error sticks and later reads return
// zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail(errShort)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// header reads Magic and the version, one this build reads.
func (d *decoder) header() uint16 {
	if m := d.take(len(Magic)); d.err == nil && string(m) != Magic {
		d.fail(errors.New("not a hand-off frame"))
	}
	v := d.u16()
	if d.err == nil && (v < oldestVersion || v > Version) {
		d.fail(&VersionError{Got: int(v)})
	}
	return v
}

func (d *decoder) byte() byte {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if v := d.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (d *decoder) bytes() []byte {
	n := d.u32()
	if n > MaxRequest && d.err == nil {
		d.fail(errors.New("a field of " + utoa(n) + " bytes, over " + strconv.Itoa(MaxRequest)))
	}
	return d.take(int(n))
}

// families reads a list of at most two family names.
func (d *decoder) families() []string {
	n := d.u32()
	if n > 2 {
		d.fail(errors.New(utoa(n) + " families"))
	}
	var fs []string
	for i := uint32(0); i < n && d.err == nil; i++ {
		fs = append(fs, string(d.bytes()))
	}
	return fs
}

func (d *decoder) end(what string) error {
	if d.err == nil && len(d.b) > 0 {
		d.fail(errors.New(strconv.Itoa(len(d.b)) + " bytes after the " + what))
	}
	if d.err != nil {
		return wrap("a hand-off "+what, d.err)
	}
	return nil
}

// VersionError is a frame of another version of the wire format.
type VersionError struct{ Got int }

func (e *VersionError) Error() string {
	return "version " + strconv.Itoa(e.Got) + ", not " + strconv.Itoa(Version)
}

func utoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// wrap is fmt.Errorf("%s: %w", msg, err).
func wrap(msg string, err error) error { return &wrapped{msg, err} }

type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg + ": " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }
