package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// redisServer is a redis-server this program started on a unix socket in a
// temporary directory, with persistence off, so that a run needs nothing
// but the package (`apt-get install redis-server`).
type redisServer struct {
	cmd    *exec.Cmd
	exited <-chan struct{} // closed once cmd has been waited for
	dir    string
	sock   string
}

// startRedis starts redis-server from PATH and waits until it answers PING
// on its socket. The socket's file appears when redis-server binds it, a
// moment before it listens, so its existence alone is not readiness: a
// client that dials in between is refused.
func startRedis() (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found: apt-get install redis-server (or set -redis-socket)")
	}
	dir, err := os.MkdirTemp("", "rcbench-redis-")
	if err != nil {
		return nil, err
	}
	s := &redisServer{dir: dir, sock: filepath.Join(dir, "redis.sock")}
	log, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer log.Close()
	s.cmd = exec.Command(bin, "--port", "0", "--unixsocket", s.sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(exited) }()
	s.exited = exited
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if answersPing(s.sock) == nil {
			return s, nil
		}
		select {
		case <-exited:
			out, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server exited before it answered on %s:\n%s", s.sock, out)
		case <-time.After(20 * time.Millisecond):
		}
	}
	lastErr := answersPing(s.sock)
	s.stop()
	out, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
	return nil, fmt.Errorf("redis-server did not answer PING on %s within 10s (%v):\n%s", s.sock, lastErr, out)
}

// answersPing sends one PING over the unix socket sock and returns nil when
// the reply is PONG.
func answersPing(sock string) error {
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// stop ends the server and removes its directory.
func (s *redisServer) stop() {
	if s == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	os.RemoveAll(s.dir)
}

// clientOption is how every client of the run reaches Redis: over the
// unix socket, one connection set per client, RESP3 (client-side caching
// needs it).
func clientOption(sock string) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress:       []string{sock},
		ForceSingleClient: true,
		DialCtxFn: func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return d.DialContext(ctx, "unix", addr)
		},
	}
}

// serverVersion is redis-server's INFO redis_version.
func serverVersion(ctx context.Context, c rueidis.Client) string {
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}

// preload writes every key with its value (no expiry), pipelined.
func preload(ctx context.Context, c rueidis.Client, ks *keyset) error {
	const batch = 1000
	for lo := 0; lo < len(ks.keys); lo += batch {
		hi := min(lo+batch, len(ks.keys))
		cmds := make(rueidis.Commands, 0, hi-lo)
		for i := lo; i < hi; i++ {
			cmds = append(cmds, c.B().Set().Key(ks.keys[i]).Value(rueidis.BinaryString(ks.value(i))).Build())
		}
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return fmt.Errorf("preload: %w", err)
			}
		}
	}
	return nil
}
