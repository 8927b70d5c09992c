package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// AuditLogPath is where the API server started with Options.AuditUsers
// writes its audit log.
func AuditLogPath(dir string) string { return filepath.Join(dir, "audit.log") }

// writeAuditPolicy logs the users' requests at the Metadata level, once
// they are answered (a watch: once it starts, and again when it ends), and
// nothing else.
func writeAuditPolicy(dir string, users []string) (string, error) {
	quoted := make([]string, len(users))
	for i, u := range users {
		quoted[i] = fmt.Sprintf("%q", u)
	}
	policy := fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: [%s]
- level: None
`, strings.Join(quoted, ", "))
	path := filepath.Join(dir, "audit-policy.yaml")
	return path, os.WriteFile(path, []byte(policy), 0o600)
}

// AuditEvent is what the harness reads of one audit log entry.
type AuditEvent struct {
	Stage, Verb string
	User        struct{ Username string }
	ObjectRef   struct{ Resource, Subresource string }
	// StageTimestamp is when the stage was reached.
	StageTimestamp MicroTime
}

// MicroTime is an audit timestamp (RFC 3339 with microseconds).
type MicroTime struct{ Time string }

// UnmarshalJSON keeps the timestamp's text.
func (m *MicroTime) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &m.Time) }

// ReadAuditLog returns the audit log's entries in order.
func ReadAuditLog(dir string) ([]AuditEvent, error) {
	f, err := os.Open(AuditLogPath(dir))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEvent
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		var e AuditEvent
		if err := json.Unmarshal(s.Bytes(), &e); err == nil {
			out = append(out, e)
		}
	}
	return out, s.Err()
}
