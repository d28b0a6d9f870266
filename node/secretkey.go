package node

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/troupe-run/troupe/a2a"
)

// The node's secret key seals the few secrets the node must keep in its event log,
// where nothing is in plain text: the token and credentials of the A2A push configs
// (a2a.PushSealer). It is never written to the log. Every node over one log must
// have the same key (Config.SecretKey: --secret-key-file, TROUPE_SECRET_KEY); a node
// without it cannot decrypt what another sealed, says so, and posts nothing with it.
// An embedded node that was given none keeps one in its data directory
// (SecretKeyFile), made the first time it is needed.

// SecretKeyFile is the file in the data directory that holds the key of a node that
// was given none (Config.SecretKey): 64 hex digits, mode 0600.
const SecretKeyFile = "secret.key"

// ParseSecretKey reads a secret key written as 64 hex digits (`openssl rand -hex
// 32`) or as the base64 of 32 bytes (`openssl rand -base64 32`). Its errors never
// hold the text.
func ParseSecretKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if b, err := hex.DecodeString(s); err == nil && len(b) == a2a.SecretKeySize {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == a2a.SecretKeySize {
			return b, nil
		}
	}
	return nil, fmt.Errorf("a secret key is 32 random bytes written as 64 hex digits or in base64 (openssl rand -hex 32); this one is %d characters that are neither", len(s))
}

// ReadSecretKeyFile reads the secret key of the file at path (ParseSecretKey).
func ReadSecretKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secret key file: %w", err)
	}
	key, err := ParseSecretKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("secret key file %s: %w", path, err)
	}
	return key, nil
}

// secretKeys gives the node its secret key: Config.SecretKey, or the key file of
// its data directory, read or made on the first call that succeeds.
type secretKeys struct {
	given []byte
	dir   string
	// shared: the node is one of a cluster, whose other nodes cannot read a key
	// file made here; logger is told so.
	shared bool
	logger *slog.Logger

	mu  sync.Mutex
	key []byte
}

// get returns the key.
func (k *secretKeys) get() ([]byte, error) {
	if k.given != nil {
		return k.given, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil {
		return k.key, nil
	}
	key, err := dataDirKey(k.dir)
	if err != nil {
		return nil, err
	}
	if k.shared {
		k.logger.Warn("this node of a cluster was given no secret key: it uses the one of its data directory, which the other nodes do not have unless they share the directory; "+
			"they cannot decrypt the secrets it seals (A2A push configs' tokens): give every node the same key (--secret-key-file, TROUPE_SECRET_KEY)",
			"file", filepath.Join(k.dir, SecretKeyFile), "key_id", a2a.KeyID(key))
	}
	k.key = key
	return key, nil
}

// dataDirKey reads the key file of dir, or makes it (a random key, mode 0600) when
// there is none. Two processes making it at once agree: the file is written aside,
// then linked into place, which fails when the other was first, whose key is read.
func dataDirKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, SecretKeyFile)
	key, err := ReadSecretKeyFile(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secret key file: %w", err)
	}
	key = make([]byte, a2a.SecretKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, SecretKeyFile+".*")
	if err != nil {
		return nil, fmt.Errorf("secret key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("secret key file: %w", err)
	}
	_, err = tmp.WriteString(hex.EncodeToString(key) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if err2 := tmp.Close(); err == nil {
		err = err2
	}
	if err != nil {
		return nil, fmt.Errorf("secret key file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return ReadSecretKeyFile(path)
	} else if err != nil {
		return nil, fmt.Errorf("secret key file: %w", err)
	}
	return key, nil
}
