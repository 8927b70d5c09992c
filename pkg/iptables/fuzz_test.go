package iptables

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// iptables-save output read from a pod's namespace is foreign input: a pod
// with NET_ADMIN writes what it likes there, and the agent's audit, CHECK
// and DEL read it back. Whatever it holds, parsing never panics, and the
// plan that reconciles it deletes, flushes and removes only rules and
// chains of ours: never a rule the pod (or its primary CNI) wrote.
func FuzzPlanTouchesOnlyOurs(f *testing.F) {
	goldens, _ := filepath.Glob(filepath.Join("testdata", "*.golden"))
	for _, g := range goldens {
		if b, err := os.ReadFile(g); err == nil { // #nosec G304 -- test data
			f.Add(b)
		}
	}
	f.Add([]byte("*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -j DNAT --to-destination 10.0.0.1\n-A OUTPUT -m comment --comment \"istio-cni\" -j RETURN\nCOMMIT\n"))
	desired := Build(DefaultSpec(), true, false).Rulesets()[0]
	f.Fuzz(func(t *testing.T, save []byte) {
		observed, err := ParseSave(save)
		if err != nil {
			return
		}
		_ = Diff(desired, observed)
		for _, d := range []*Ruleset{desired, nil} {
			plan, err := Plan(d, observed)
			if err != nil {
				continue
			}
			checkOnlyOurs(t, plan, observed)
		}
	})
}

// checkOnlyOurs: every -D names a rule of ours by its number in the
// observed chain, and every -F and -X one of our chains.
func checkOnlyOurs(t *testing.T, plan []byte, observed *Observed) {
	t.Helper()
	table := ""
	for line := range strings.Lines(string(plan)) {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case strings.HasPrefix(f[0], "*"):
			table = f[0][1:]
		case (f[0] == "-F" || f[0] == "-X") && (len(f) != 2 || !Owned(f[1])):
			t.Fatalf("the plan flushes or removes a chain that is not ours: %q\n%s", line, plan)
		case f[0] == "-D":
			n, err := strconv.Atoi(f[len(f)-1])
			obs := observed.Tables[table]
			if len(f) != 3 || err != nil || obs == nil || n < 1 || n > len(obs.Rules[f[1]]) || !ours(obs.Rules[f[1]][n-1]) {
				t.Fatalf("the plan deletes a rule that is not ours: %q\n%s", line, plan)
			}
		}
	}
}
