// Command testproxy is a small static binary for integration and e2e tests.
// It stands in for Istio's sidecar proxy ("proxy") and for a plain workload
// ("server"); each answers every TCP connection with one line and closes, so a
// test can see where a connection landed after iptables REDIRECT. "client"
// dials and prints whatever the peer sent.
//
//	testproxy proxy  [--outbound-port 15001] [--inbound-port 15006] [--tproxy] [--forward] [--ready-file PATH] [--health-addr ADDR]
//	testproxy server --port PORT [--name server] [--ready-file PATH]
//	testproxy client --addr HOST:PORT [--timeout 5s] [--every DURATION] [--udp [--src-port PORT]]
//	testproxy udp    --port PORT [--host IP] [--name udp] [--ready-file PATH]
//
// With --forward, the proxy's outbound listener also dials the connection's
// original destination (as the proxy's own uid, which the sidecar rules
// let out directly) and appends what that peer sent after its own line: a
// meshed client calling a meshed server then reads both proxies' lines.
//
// With --every, client repeats the exchange until stopped, writing each
// reply, or "error: ..." for a failed attempt, as it comes (an app
// container's steady traffic in e2e tests).
//
// Lines written to the peer:
//
//	proxy listener=<outbound|inbound> orig=<ip:port|none> peer=<ip:port> uid=<uid>
//	server name=<name> local=<ip:port> peer=<ip:port>
//	udp name=<name> peer=<ip:port>
//
// The ready file is written (atomically) once every listener is bound; it holds
// one "listener=<name> addr=<ip:port>" line per listener, so tests that pass
// port 0 can learn the bound port.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

const usage = `usage:
  testproxy proxy  [--outbound-port 15001] [--inbound-port 15006] [--tproxy] [--forward] [--ready-file PATH] [--health-addr ADDR]
  testproxy server --port PORT [--name NAME] [--ready-file PATH]
  testproxy client --addr HOST:PORT [--timeout 5s] [--every DURATION] [--udp [--src-port PORT]]
  testproxy udp    --port PORT [--host IP] [--name udp] [--ready-file PATH]
`

// errUsage marks a command-line mistake the flag package has already reported.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one subcommand until it finishes or ctx is cancelled and
// returns the exit code: 0 success (or a clean stop), 1 failure, 2 bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "proxy":
		err = runProxy(ctx, args[1:], stderr)
	case "server":
		err = runServer(ctx, args[1:], stderr)
	case "client":
		err = runClient(ctx, args[1:], stdout, stderr)
	case "udp":
		err = runUDP(ctx, args[1:], stderr)
	default:
		fmt.Fprintf(stderr, "testproxy: unknown command %q\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "testproxy %s: %v\n", args[0], err)
		return 1
	}
}

func runProxy(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("proxy", stderr)
	outbound := portValue{port: 15001}
	inbound := portValue{port: 15006}
	fs.Var(&outbound, "outbound-port", "port of the outbound listener (0 picks a free port)")
	fs.Var(&inbound, "inbound-port", "port of the inbound listener (0 picks a free port)")
	readyFile := fs.String("ready-file", "", "file written once both listeners are up")
	tproxy := fs.Bool("tproxy", false, "inbound listener transparent (IP_TRANSPARENT), for TPROXY mode")
	ipv4Only := fs.Bool("ipv4-only", false, "listen on 0.0.0.0 only, as Envoy does without ISTIO_DUAL_STACK")
	health := fs.String("health-addr", "", "address of an HTTP GET /healthz/ready answering 200, where Istio's injected probes ask (Envoy's :15021)")
	forward := fs.Bool("forward", false, "outbound: also dial the original destination and append its reply")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *health != "" {
		stop, err := serveHealth(ctx, *health)
		if err != nil {
			return err
		}
		defer stop()
	}
	in := endpoint{name: "inbound", port: inbound.port, reply: proxyReply("inbound"), ipv4Only: *ipv4Only}
	if *tproxy {
		in.reply, in.transparent = tproxyReply("inbound"), true
	}
	out := endpoint{name: "outbound", port: outbound.port, reply: proxyReply("outbound"), ipv4Only: *ipv4Only}
	if *forward {
		out.reply = forwardReply(ctx, out.reply)
	}
	return serve(ctx, []endpoint{out, in}, *readyFile, stderr)
}

func runServer(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("server", stderr)
	var port portValue
	fs.Var(&port, "port", "port to listen on (required; 0 picks a free port)")
	name := fs.String("name", "server", "name reported in every reply")
	readyFile := fs.String("ready-file", "", "file written once the listener is up")
	if err := parse(fs, args); err != nil {
		return err
	}
	if !port.set {
		fmt.Fprintln(stderr, "testproxy server: --port is required")
		fs.Usage()
		return errUsage
	}
	return serve(ctx, []endpoint{
		{name: "server", port: port.port, reply: serverReply(*name)},
	}, *readyFile, stderr)
}

func runClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("client", stderr)
	addr := fs.String("addr", "", "HOST:PORT to dial (required)")
	timeout := fs.Duration("timeout", 5*time.Second, "limit for the whole exchange: dial and read until EOF")
	every := fs.Duration("every", 0, "repeat the exchange this often until stopped (0: once)")
	udp := fs.Bool("udp", false, "send one UDP datagram and print the reply, instead of TCP")
	var srcPort portValue
	fs.Var(&srcPort, "src-port", "with --udp: the local port to send from (default: any)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *every < 0 {
		fmt.Fprintf(stderr, "testproxy client: --every must not be negative, got %s\n", *every)
		return errUsage
	}
	if *addr == "" {
		fmt.Fprintln(stderr, "testproxy client: --addr is required")
		fs.Usage()
		return errUsage
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "testproxy client: --timeout must be positive, got %s\n", *timeout)
		return errUsage
	}
	exchange := dialAndCopy
	if *udp {
		exchange = func(ctx context.Context, addr string, timeout time.Duration, out io.Writer) error {
			return udpExchange(ctx, addr, srcPort.port, timeout, out)
		}
	}
	if *every == 0 {
		return exchange(ctx, *addr, *timeout, stdout)
	}
	t := time.NewTicker(*every)
	defer t.Stop()
	for {
		if err := exchange(ctx, *addr, *timeout, stdout); err != nil && ctx.Err() == nil {
			fmt.Fprintf(stdout, "error: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("testproxy "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses flags and rejects positional arguments.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage // already printed by fs
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected arguments %q\n", fs.Name(), fs.Args())
		fs.Usage()
		return errUsage
	}
	return nil
}

// portValue is a TCP port flag; set records whether the user gave it.
type portValue struct {
	port uint16
	set  bool
}

func (p *portValue) String() string { return strconv.Itoa(int(p.port)) }

func (p *portValue) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return fmt.Errorf("want a port number 0-65535, got %q", s)
	}
	p.port, p.set = uint16(n), true
	return nil
}

// dialAndCopy dials addr and copies everything the peer sends to out until
// EOF; timeout bounds the whole exchange.
func dialAndCopy(ctx context.Context, addr string, timeout time.Duration, out io.Writer) error {
	deadline := time.Now().Add(timeout)
	d := net.Dialer{Deadline: deadline}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err // already names the address
	}
	defer c.Close()
	if err := c.SetDeadline(deadline); err != nil {
		return fmt.Errorf("read %s: %w", addr, err)
	}
	if _, err := io.Copy(out, c); err != nil {
		return fmt.Errorf("read %s: %w", addr, err)
	}
	return nil
}
