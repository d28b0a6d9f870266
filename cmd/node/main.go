package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
	// Zone data in the binary: the clock tool answers for any IANA zone, even in bare containers.
	_ "time/tzdata"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, options{})
	stop()
	os.Exit(code)
}

// options lets tests add tools and wrap the model of a real node process.
type options struct {
	extraTools []tools.Tool
	wrapModel  func(llm.Model) llm.Model
}

const usage = `usage:
  node run [--data DIR] [--model offline|scripted:FILE] "<task>"
  node serve [--data DIR] [--http ADDR] [--model offline|scripted:FILE]
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer, opt options) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("node "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", envOr("TROUPE_DATA", ".troupe"), "data directory of the embedded event log")
	addr := fs.String("http", envOr("TROUPE_HTTP_ADDR", "127.0.0.1:8080"), "HTTP listen address (serve)")
	modelFlag := fs.String("model", envOr("TROUPE_MODEL", "offline"), "model: offline, or scripted:FILE")
	verbose := fs.Bool("v", false, "log at debug level")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	model, err := llm.FromSpec(*modelFlag)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if opt.wrapModel != nil {
		model = opt.wrapModel(model)
	}
	cfg := node.Config{DataDir: *data, Model: model, Logger: logger}
	if len(opt.extraTools) > 0 {
		cfg.Tools = append([]tools.Tool{tools.Calculator{}, tools.NewClock(nil)}, opt.extraTools...)
	}
	switch args[0] {
	case "run":
		if fs.NArg() != 1 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		return runTask(ctx, cfg, fs.Arg(0), stdout, stderr)
	case "serve":
		if fs.NArg() != 0 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		return serve(ctx, cfg, *addr, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func runTask(ctx context.Context, cfg node.Config, input string, stdout, stderr io.Writer) int {
	n, err := node.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	defer n.Close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- n.Run(runCtx) }()
	select {
	case <-n.Running():
	case err := <-runErr:
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	id := "cli-" + actors.UUIDv7{}.NewID()
	events, stop := n.Watch(id)
	defer stop()
	fmt.Fprintf(stdout, "session %s (model: %s)\n", id, cfg.Model.Name())
	if _, err := n.Submit(ctx, node.Task{Input: input, SessionID: id}); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintf(stderr, "interrupted; the session is recorded and resumes with: node serve --data %s\n", n.DataDir())
			return 130
		case e, ok := <-events:
			if !ok {
				fmt.Fprintln(stderr, "error: lost the live event feed")
				return 1
			}
			if code, done := node.PrintStep(stdout, e); done {
				fmt.Fprintf(stdout, "session %s\n", id)
				return code
			}
		}
	}
}

func serve(ctx context.Context, cfg node.Config, addr string, stderr io.Writer) int {
	n, err := node.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		n.Close()
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	srv := &http.Server{Handler: n.Handler(), ReadHeaderTimeout: 10 * time.Second}
	// Live streams never end on their own: end them when shutdown begins.
	srv.RegisterOnShutdown(n.CloseStreams)
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- n.Run(runCtx) }()
	httpErr := make(chan error, 1)
	go func() { httpErr <- srv.Serve(ln) }()
	cfg.Logger.Info("node serving", "http", ln.Addr().String(), "data", n.DataDir(), "model", cfg.Model.Name())
	code := 0
	select {
	case <-ctx.Done():
		cfg.Logger.Info("shutting down")
	case err := <-runErr:
		cfg.Logger.Error("router stopped", "err", err)
		code = 1
	case err := <-httpErr:
		cfg.Logger.Error("http server stopped", "err", err)
		code = 1
	}
	shutCtx, shutCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer shutCancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		cfg.Logger.Warn("http shutdown", "err", err)
	}
	cancel()
	if err := n.Close(); err != nil {
		cfg.Logger.Error("close node", "err", err)
		code = 1
	}
	cfg.Logger.Info("stopped")
	return code
}
