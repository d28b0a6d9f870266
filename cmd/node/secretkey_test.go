package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The node's secret key: --secret-key-file wins over TROUPE_SECRET_KEY, which wins
// over TROUPE_SECRET_KEY_FILE and the file's "secret_key_file"; a key that is not
// 32 bytes in hex or base64 is refused without being echoed.
func TestSecretKeySettings(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hexKey := strings.Repeat("ab", 32)
	fromFile := write("k1", hexKey+"\n")
	parse := func(args ...string) ([]byte, error) {
		fs := flag.NewFlagSet("node", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		file := fs.String("secret-key-file", os.Getenv("TROUPE_SECRET_KEY_FILE"), "")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return secretKey(fs, *file)
	}
	if key, err := parse(); key != nil || err != nil {
		t.Fatalf("no setting: %x, %v", key, err)
	}
	t.Setenv("TROUPE_SECRET_KEY_FILE", fromFile)
	if key, err := parse(); err != nil || !bytes.Equal(key, bytes.Repeat([]byte{0xab}, 32)) {
		t.Fatalf("TROUPE_SECRET_KEY_FILE: %x, %v", key, err)
	}
	t.Setenv("TROUPE_SECRET_KEY", "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=")
	if key, err := parse(); err != nil || !bytes.Equal(key, bytes.Repeat([]byte{1}, 32)) {
		t.Fatalf("TROUPE_SECRET_KEY over the file: %x, %v", key, err)
	}
	if key, err := parse("--secret-key-file", fromFile); err != nil || key[0] != 0xab {
		t.Fatalf("--secret-key-file over TROUPE_SECRET_KEY: %x, %v", key, err)
	}
	t.Setenv("TROUPE_SECRET_KEY", "too-short-secret-value")
	if _, err := parse(); err == nil || strings.Contains(err.Error(), "too-short-secret-value") {
		t.Fatalf("a bad TROUPE_SECRET_KEY: %v", err)
	}
	if _, err := parse("--secret-key-file", write("k2", "not-a-key-zz")); err == nil || strings.Contains(err.Error(), "not-a-key-zz") {
		t.Fatalf("a bad key file: %v", err)
	}
}
