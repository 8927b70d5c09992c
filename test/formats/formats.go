// Package formats ties each format two builds of istio-cni share (the
// sandbox records, the wire's frames and datagrams, the helper's request,
// the cache files) to its version. During an upgrade or a rollback one
// build's plugin meets the other's agent, and one build's agent reads the
// other's records: a reader refuses a version newer than its own rather
// than act on the half of it that it knows. That holds only if every
// change to a format takes a new version, which Check enforces: each
// version's shape is frozen in a golden file, and a shape that differs
// from its version's golden fails until the version is bumped.
package formats

import (
	"encoding"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

var freeze = flag.Bool("formats.freeze", false, "write the golden of a format version that has none yet (never rewrites one)")

// Check compares shape, a format's shape at version, with its golden
// testdata/formats/<name>.v<version>.txt. A golden is written only with
// -formats.freeze and only when missing: a version's shape never changes.
func Check(t *testing.T, name string, version int, shape string) {
	t.Helper()
	path := filepath.Join("testdata", "formats", fmt.Sprintf("%s.v%d.txt", name, version))
	want, err := os.ReadFile(path) // #nosec G304 -- a golden in testdata
	switch {
	case os.IsNotExist(err) && *freeze:
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(shape), 0o644); err != nil { // #nosec G306 -- a golden
			t.Fatal(err)
		}
		return
	case os.IsNotExist(err):
		t.Fatalf("%s version %d has no golden (%s): freeze it with go test -run %s -formats.freeze", name, version, path, t.Name())
	case err != nil:
		t.Fatal(err)
	}
	if string(want) != shape {
		t.Errorf("the %s format differs from version %d's (%s) but is still version %d.\n"+
			"A build of version %d would read it and act on the part it knows. Bump the version, keep reading the older ones, "+
			"and freeze the new version's golden (-formats.freeze).\n--- version %d\n%s\n--- now\n%s",
			name, version, path, version, version, version, want, shape)
	}
}

// JSON is the shape of values of v's type as encoding/json writes them:
// one line per field path, with its tag's options, and its kind, sorted.
func JSON(v any) string {
	var lines []string
	walk(reflect.TypeOf(v), "", map[reflect.Type]bool{}, &lines)
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

var (
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	timeType      = reflect.TypeFor[time.Time]()
)

func walk(t reflect.Type, path string, seen map[reflect.Type]bool, lines *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	leaf := func(kind string) { *lines = append(*lines, strings.TrimPrefix(path, ".")+" "+kind) }
	switch {
	case t == timeType:
		leaf("time (RFC 3339)")
		return
	case t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler),
		t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler):
		leaf("text " + t.String())
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if seen[t] {
			leaf("recursive " + t.String())
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			switch {
			case tag == "-" || !f.IsExported():
				continue
			case f.Anonymous && name == "":
				walk(f.Type, path, seen, lines)
				continue
			case name == "":
				name = f.Name
			}
			if opts != "" {
				// ",string" changes the encoding; ",omitempty" what an
				// older reader sees of a zero value.
				name += "," + opts
			}
			walk(f.Type, path+"."+name, seen, lines)
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			leaf("bytes (base64)")
			return
		}
		walk(t.Elem(), path+"[]", seen, lines)
	case reflect.Map:
		walk(t.Elem(), path+"{"+t.Key().Kind().String()+"}", seen, lines)
	default:
		leaf(t.Kind().String())
	}
}
