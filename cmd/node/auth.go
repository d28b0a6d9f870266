package main

import (
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/troupe-run/troupe/node"
)

// httpConfig is the HTTP API's protection: the configuration file's (file) under
// the environment and the flags. Tokens come from --auth-token when any is given,
// else from TROUPE_AUTH_TOKENS (comma-separated) when set, else from the file's
// "auth.tokens"; the tokens file adds its own (read here when serving, so that a
// bad one stops the node before it starts). The CORS origins and the trusted
// proxies come from their flags, else from TROUPE_CORS_ORIGINS and
// TROUPE_TRUSTED_PROXIES (comma-separated), else from the file. Its errors never
// quote a token.
func httpConfig(file node.HTTPConfig, tokenFlags, corsFlags, proxyFlags []string, tokensFile string, rate float64, burst int, maxBody int64, serving bool) (node.HTTPConfig, error) {
	c := file
	switch {
	case len(tokenFlags) > 0:
		c.Auth.Tokens = tokenFlags
	case os.Getenv("TROUPE_AUTH_TOKENS") != "":
		c.Auth.Tokens = nonEmpty(strings.Split(os.Getenv("TROUPE_AUTH_TOKENS"), ","))
	}
	if len(corsFlags) > 0 {
		c.CORS.Origins = corsFlags
	} else if v := os.Getenv("TROUPE_CORS_ORIGINS"); v != "" {
		c.CORS.Origins = nonEmpty(strings.Split(v, ","))
	}
	if len(proxyFlags) > 0 {
		c.TrustedProxies = proxyFlags
	} else if v := os.Getenv("TROUPE_TRUSTED_PROXIES"); v != "" {
		c.TrustedProxies = nonEmpty(strings.Split(v, ","))
	}
	c.Auth.TokensFile, c.Auth.Rate, c.Auth.Burst, c.MaxBody = tokensFile, rate, burst, maxBody
	if err := c.Validate(); err != nil {
		return c, err
	}
	if c.Auth.TokensFile != "" && serving {
		if _, err := node.ReadTokensFile(c.Auth.TokensFile); err != nil {
			return c, err
		}
	}
	return c, nil
}

// loopback reports whether addr is a loopback address (not an unspecified one,
// which listens on every interface).
func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// notifyHUP takes SIGHUP from Go's default action (ending the process) for
// node serve, from its start: SIGHUP is its reload signal (systemctl reload, a
// logrotate script send it), which must never stop it ungracefully, whether or
// not it has something to reload. The signals wait in the channel (one at most:
// a storm is one reload) until reloadOnHUP takes them; stop restores the default.
func notifyHUP() (hup chan os.Signal, stop func()) {
	hup = make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup, func() { signal.Stop(hup) }
}

// reloadOnHUP reads the tokens file again on each SIGHUP of hup until stop; a node
// without one (tokens false) logs that it has nothing to reload.
func reloadOnHUP(hup <-chan os.Signal, n *node.Node, tokens bool, logger *slog.Logger) (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				if !tokens {
					logger.Info("SIGHUP: nothing to reload: the node has no tokens file (--auth-tokens-file)")
				} else if err := n.ReloadTokens(); err != nil {
					logger.Warn("auth tokens not reloaded: the previous ones stay", "err", err)
				} else {
					logger.Info("auth tokens reloaded")
				}
			case <-done:
				return
			}
		}
	}()
	return func() { close(done) }
}

// authSecrets are the API's tokens, which the node keeps out of its events and logs
// like its other secrets: those given, and those of the tokens file as it is at
// start, known to the log from its first line (the node's gate registers those it
// reads again on SIGHUP with the same Redactor: node.Config.Redactor).
func authSecrets(c node.AuthConfig) []string {
	out := slices.Clone(c.Tokens)
	if c.TokensFile != "" {
		tokens, _ := node.ReadTokensFile(c.TokensFile) // read once already: a bad file stopped the node
		out = append(out, tokens...)
	}
	return out
}
