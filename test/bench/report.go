package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

func printHeader(plugin string, n, conc, cpus int) {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	ipt, _ := exec.Command("iptables", "--version").Output()
	st, _ := os.Stat(plugin)
	fmt.Printf("istio-cni plugin benchmark: %d samples each, %d-concurrent runs, %d CPUs, kernel %s, %s, binary %.1f MB\n\n",
		n, conc, runtime.NumCPU(), strings.TrimSpace(string(kernel)), strings.TrimSpace(string(ipt)), float64(st.Size())/1e6)
	if cpus > 0 {
		fmt.Printf("Each plugin runs as on a node with %d CPUs (GOMAXPROCS=%d in its environment).\n\n", cpus, cpus)
	}
	fmt.Println("| measurement | p50 | p99 | max |")
	fmt.Println("|---|---|---|---|")
}

func (b *bench) version() error {
	s, err := collect(b.n, 1, func() (sample, error) {
		return b.execPlugin("VERSION", "bench", "", []byte(`{"cniVersion":"1.0.0"}`), false)
	})
	if err != nil {
		return err
	}
	row("VERSION", s)
	// STATUS, as a runtime asks it of a chain whose conflist says 1.1.0:
	// containerd does each time kubelet asks for the runtime's status.
	s, err = collect(b.n, 1, func() (sample, error) {
		return b.execPlugin("STATUS", "bench", "", []byte(strings.Replace(string(b.stdin("auto", "null")), `"1.0.0"`, `"1.1.0"`, 1)), false)
	})
	if err != nil {
		return err
	}
	row("STATUS (CNI 1.1.0)", s)
	return nil
}

// peakRSS runs ADDs under GNU time and reports the largest peak RSS.
func (b *bench) peakRSS() error {
	s, err := collect(min(b.n, 50), 1, b.add(release.Auto, "bench", prevDual, false, true))
	if err != nil {
		return err
	}
	fmt.Printf("\nPeak RSS over %d dual-stack ADDs through the API (GNU time, %%M: the plugin or its API lookup helper, whichever is larger): %.1f MB\n", len(s), peakMB(s))
	return nil
}

// peakMB is the largest peak RSS among samples taken with rss.
func peakMB(s []sample) float64 {
	var kib int64
	for _, x := range s {
		kib = max(kib, x.maxRSS)
	}
	return float64(kib) / 1024
}

func (b *bench) backend(name string, conc int) error {
	be, err := release.ParseBackend(name)
	if err != nil {
		return err
	}
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	text, err := iptables.Plan(&rs, nil)
	if err != nil {
		return err
	}
	for _, m := range []struct {
		label string
		conc  int
		one   func() (sample, error)
	}{
		{"floor: bare iptables-restore (" + name + ")", 1, func() (sample, error) { return floorOnce(be, text) }},
		{"ADD meshed pod (" + name + ")", 1, b.add(be, "bench", prevV4, true, false)},
		{"ADD meshed pod, reporting to a listening agent (" + name + ")", 1, b.addWith(be, "bench", b.reporting(b.stdin(name, prevV4)), true, false)},
		{"ADD meshed dual-stack pod (" + name + ")", 1, b.add(be, "bench", prevDual, true, false)},
		{"ADD meshed pod, DNS capture (" + name + ")", 1, b.add(be, "bench-dns", prevV4, true, false)},
		{"ADD meshed pod, TPROXY (" + name + ")", 1, b.add(be, "bench-tproxy", prevV4, true, false)},
		{fmt.Sprintf("floor, %d at once (%s)", conc, name), conc, func() (sample, error) { return floorOnce(be, text) }},
		{fmt.Sprintf("ADD, %d at once (%s)", conc, name), conc, b.add(be, "bench", prevV4, false, false)},
	} {
		s, err := collect(b.n, m.conc, m.one)
		if err != nil {
			return fmt.Errorf("%s: %w", m.label, err)
		}
		row(m.label, s)
	}
	return nil
}

func row(label string, s []sample) {
	ds := make([]time.Duration, len(s))
	for i, x := range s {
		ds[i] = x.d
	}
	slices.Sort(ds)
	pct := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	fmt.Printf("| %s | %s | %s | %s |\n", label, ms(pct(0.50)), ms(pct(0.99)), ms(ds[len(ds)-1]))
	if api, netns := median(s, func(x sample) time.Duration { return x.api }), median(s, func(x sample) time.Duration { return x.netns }); api > 0 {
		total := median(s, func(x sample) time.Duration { return x.total })
		fmt.Printf("| &nbsp;&nbsp;of which the verb / its pod lookup / its rules in the netns (plugin's log, p50) | %s / %s / %s | | |\n", ms(total), ms(api), ms(netns))
	}
}

// medianFaults is the median of samples' page faults (taken with rss).
func medianFaults(s []sample) int64 {
	fs := make([]int64, len(s))
	for i, x := range s {
		fs[i] = x.faults
	}
	slices.Sort(fs)
	return fs[len(fs)/2]
}

func median(s []sample, f func(sample) time.Duration) time.Duration {
	ds := make([]time.Duration, len(s))
	for i, x := range s {
		ds[i] = f(x)
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
