package main

import (
	"context"
	"expvar"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
)

// serveChild is the -serve mode: an embedded node configured as node serve configures
// one on the offline model (in-process bus, SQLite log in -data), its HTTP API plus
// /debug/pprof, /debug/vars and POST /debug/free (runtime/debug.FreeOSMemory). It
// prints "listening ADDR" on stdout once it serves, and stops on SIGTERM or SIGINT.
func serveChild(args []string) error {
	fs := flag.NewFlagSet("soak -serve", flag.ContinueOnError)
	data := fs.String("data", "", "data directory")
	idle := fs.Duration("idle-timeout", time.Minute, "session idle timeout")
	maxSessions := fs.Int("max-sessions", 0, "bound on the live session actors (0: the node's default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *data == "" {
		return fmt.Errorf("-data is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	n, err := node.New(ctx, node.Config{DataDir: *data, Model: llm.Offline{}, IdleTimeout: *idle, MaxLiveSessions: *maxSessions, Logger: logger})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", n.Handler())
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.Handle("/debug/vars", expvar.Handler())
	mux.HandleFunc("POST /debug/free", func(w http.ResponseWriter, _ *http.Request) {
		debug.FreeOSMemory()
		w.WriteHeader(http.StatusNoContent)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = n.Close()
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	srv.RegisterOnShutdown(n.CloseStreams)
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- n.Run(runCtx) }()
	select {
	case <-n.Running():
	case err := <-runErr:
		_ = n.Close()
		return err
	}
	httpErr := make(chan error, 1)
	go func() { httpErr <- srv.Serve(ln) }()
	fmt.Printf("listening %s\n", ln.Addr())
	select {
	case <-ctx.Done():
	case err = <-runErr:
	case err = <-httpErr:
	}
	shutCtx, shutCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer shutCancel()
	_ = srv.Shutdown(shutCtx)
	if cerr := n.Close(); err == nil {
		err = cerr
	}
	return err
}
