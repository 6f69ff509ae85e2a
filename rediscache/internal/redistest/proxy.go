package redistest

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target address, and can cut them or
// stop forwarding (a network partition that resets nothing).
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	pairs  map[int]func() // the end function of every open connection pair
	next   int
	gate   chan struct{} // closed while forwarding; open while blackholed
	closed bool
	wg     sync.WaitGroup
}

// StartProxy starts a proxy to target for tb and closes it when the test
// ends.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := NewProxy(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// NewProxy starts a proxy to target on a free loopback port.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{ln: ln, target: target, pairs: map[int]func(){}, gate: open}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection through the proxy, both ends (the peers see
// EOF or a reset). New connections are accepted as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	ends := make([]func(), 0, len(p.pairs))
	for _, end := range p.pairs {
		ends = append(ends, end)
	}
	p.mu.Unlock()
	for _, end := range ends {
		end()
	}
}

// Blackhole stops (on) or resumes (off) forwarding, in both directions, on
// every connection, open or new. The sockets stay open and data sent while
// blackholed is held, then delivered in order on resume, as a partition
// that heals before TCP gives up would.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate: // forwarding
		if on {
			p.gate = make(chan struct{})
		}
	default: // blackholed
		if !on {
			close(p.gate)
		}
	}
}

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.Blackhole(false)
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		}
		id := p.next
		p.next++
		done := make(chan struct{})
		var once sync.Once
		end := func() {
			once.Do(func() {
				close(done)
				p.mu.Lock()
				delete(p.pairs, id)
				p.mu.Unlock()
				_ = client.Close()
				_ = server.Close()
			})
		}
		p.pairs[id] = end
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(server, client, done, end)
		go p.pipe(client, server, done, end)
	}
}

// pipe copies from src to dst, holding each chunk while blackholed, until
// either side fails or the pair ends.
func (p *Proxy) pipe(dst, src net.Conn, done chan struct{}, end func()) {
	defer p.wg.Done()
	defer end()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for {
				p.mu.Lock()
				gate := p.gate
				p.mu.Unlock()
				select {
				case <-gate:
				case <-done:
					return
				}
				p.mu.Lock()
				still := p.gate == gate
				p.mu.Unlock()
				if still { // not blackholed again since the gate opened
					break
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
