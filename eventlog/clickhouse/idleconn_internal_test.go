package clickhouse

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestSuspectConn: a request written on a connection after idleAfter of silence
// fails with errNoAnswer when no answer begins within the response timeout, and
// closes the other connections idle since before; a request on a connection in use,
// and the next ones once an answer began, wait as long as the driver lets them.
func TestSuspectConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The server answers each line "<delay>" after that delay, and "never" never.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					d, err := time.ParseDuration(line[:len(line)-1])
					if err != nil {
						continue // never
					}
					time.Sleep(d)
					if _, err := c.Write([]byte("ok\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	const timeout = 300 * time.Millisecond
	dial := dialer(Config{DialTimeout: time.Second, ResponseTimeout: timeout})
	open := func() (net.Conn, *bufio.Reader) {
		c, err := dial(context.Background(), ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	// ask sends line under a driver deadline of a minute and reads the answer.
	ask := func(c net.Conn, r *bufio.Reader, line string) error {
		if err := c.SetDeadline(time.Now().Add(time.Minute)); err != nil {
			return err
		}
		defer c.SetDeadline(time.Time{})
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			return err
		}
		_, err := r.ReadString('\n')
		return err
	}

	// A connection in use waits for a slow answer; so does one that sat idle, once
	// an answer began.
	c, r := open()
	if err := ask(c, r, (3 * timeout).String()); err != nil {
		t.Fatalf("slow answer on a connection in use: %v", err)
	}
	time.Sleep(idleAfter + 100*time.Millisecond)
	if err := ask(c, r, "50ms"); err != nil {
		t.Fatalf("quick answer after an idle spell: %v", err)
	}
	if err := ask(c, r, (3 * timeout).String()); err != nil {
		t.Fatalf("slow answer once the connection proved alive: %v", err)
	}

	// busy: a request in flight since before idle's spell began; sibling: idle
	// since before it; idle: no answer after its spell.
	busy, busyR := open()
	idle, idleR := open()
	sibling, _ := open()
	if err := ask(busy, busyR, "10ms"); err != nil {
		t.Fatal(err)
	}
	inFlight := make(chan error, 1)
	go func() { inFlight <- ask(busy, busyR, (idleAfter + 5*timeout).String()) }()
	time.Sleep(10 * time.Millisecond)
	if err := ask(idle, idleR, "10ms"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(idleAfter + 100*time.Millisecond)
	// errNoAnswer: the response timeout ended the wait, not the driver's minute.
	err = ask(idle, idleR, "never")
	var noAnswer *errNoAnswer
	if !errors.As(err, &noAnswer) {
		t.Fatalf("no answer after an idle spell: %v, want errNoAnswer", err)
	}
	if _, err := sibling.Write([]byte("10ms\n")); err == nil {
		t.Error("a connection idle since before the dead one's idle spell is still open")
	}
	if err := <-inFlight; err != nil {
		t.Errorf("a request in flight on another connection failed: %v", err)
	}
}

// TestSuspectConnTLS: with Config.TLS the dialer runs the handshake over its
// connection, naming the address's host as the server when the config names none,
// and the driver finds the connection under the TLS one (to check it before reuse).
func TestSuspectConnTLS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "clickhouse"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		_, _ = c.Write([]byte(line))
	}()
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	c, err := dialer(Config{DialTimeout: 5 * time.Second, ResponseTimeout: time.Second, TLS: &tls.Config{RootCAs: roots}})(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc, ok := c.(*tls.Conn)
	if !ok {
		t.Fatalf("connection is a %T, want *tls.Conn", c)
	}
	if _, ok := tc.NetConn().(syscall.Conn); !ok {
		t.Fatalf("the connection under TLS, a %T, has no file descriptor for the driver's check", tc.NetConn())
	}
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if got, err := bufio.NewReader(c).ReadString('\n'); err != nil || got != "hello\n" {
		t.Fatalf("echo: %q, %v", got, err)
	}
}
