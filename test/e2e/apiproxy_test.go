package e2e

import (
	"errors"
	"io"
	"net"
	"sync"
)

// apiProxy stands where the in-cluster API address (the kubernetes Service)
// would be for the DaemonSet and the plugin's kubeconfig. Down closes the
// listener and every connection through it, so the plugin finds the API
// unreachable while kubelet, which talks to the API directly, goes on.
type apiProxy struct {
	addr, target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// newAPIProxy listens on listen (host:port) and forwards every
// connection to target.
func newAPIProxy(listen, target string) (*apiProxy, error) {
	p := &apiProxy{target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	return p, nil
}

func (p *apiProxy) port() int { return p.lnAddr().Port }

func (p *apiProxy) lnAddr() *net.TCPAddr {
	a, _ := net.ResolveTCPAddr("tcp", p.addr)
	return a
}

func (p *apiProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

func (p *apiProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	p.untrack(c, up)
}

// track registers a connection pair, or closes it if the proxy went down.
func (p *apiProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *apiProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// down refuses new connections and cuts the open ones.
func (p *apiProxy) down() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	p.wg.Wait()
}

// up listens again on the same address.
func (p *apiProxy) up() error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return errors.Join(errors.New("re-listening on "+p.addr), err)
	}
	p.serve(ln)
	return nil
}
