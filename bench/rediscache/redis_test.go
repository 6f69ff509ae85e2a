package main

import (
	"bufio"
	"net"
	"path/filepath"
	"syscall"
	"testing"
)

// TestBoundSocketIsNotReady holds that a socket file redis-server has bound
// but not yet listened on is not taken as a server that is up: dialing it
// is refused, and only an answered PING counts.
func TestBoundSocketIsNotReady(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	if err := answersPing(sock); err == nil {
		t.Fatal("a bound socket nobody listens on was taken as a ready server")
	}
	syscall.Close(fd)
	if err := syscall.Unlink(sock); err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r := bufio.NewReader(c)
			if line, _ := r.ReadString('\n'); line == "PING\r\n" {
				c.Write([]byte("+PONG\r\n"))
			} else {
				c.Write([]byte("-ERR\r\n"))
			}
			c.Close()
		}
	}()
	if err := answersPing(sock); err != nil {
		t.Fatalf("a listener answering PONG was not taken as ready: %v", err)
	}
}
