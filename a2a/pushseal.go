package a2a

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	sdk "github.com/a2aproject/a2a-go/a2a"
)

// ErrUndecryptable is the error of a push config whose token or credentials were
// recorded sealed with another secret key than the node's (or the node has none):
// the config is listed without them, its GET fails with it, and no notification is
// posted to it. Give every node of a cluster the same key, or set the config again.
var ErrUndecryptable = errors.New("a2a: a push config's token and credentials cannot be decrypted with this node's secret key")

// SecretKeySize is the size of a node's secret key: AES-256.
const SecretKeySize = 32

// PushSealer seals the secrets of push configs (their token, their authentication
// credentials) for the log with AES-256-GCM under the node's secret key, which is
// never in the log; a random nonce per value, and the task and config IDs as
// additional data, so that a sealed value cannot be moved to another config.
// A sealed value reads "v1.<key id>.<base64url(nonce|ciphertext)>": the key ID (the
// first 8 hex digits of a SHA-256 of the key) tells a wrong key from a damaged
// value without saying anything of the key.
type PushSealer struct {
	// key returns the node's secret key (SecretKeySize bytes); it is called when a
	// value is first sealed or opened, and again after it failed.
	key func() ([]byte, error)

	mu   sync.Mutex
	aead cipher.AEAD
	id   string
}

// NewPushSealer returns a sealer under the key key returns (SecretKeySize bytes).
func NewPushSealer(key func() ([]byte, error)) *PushSealer { return &PushSealer{key: key} }

// pushSecrets are what a sealed value holds.
type pushSecrets struct {
	Token       string `json:"token,omitempty"`
	Credentials string `json:"credentials,omitempty"`
	// URL is the config's URL when it had credentials (A2APushSet.HadURLCredentials).
	URL string `json:"url,omitempty"`
}

// KeyID names key in a sealed value and in error messages: the first 8 hex digits
// of the SHA-256 of a fixed label and the key.
func KeyID(key []byte) string {
	sum := sha256.Sum256(append([]byte("troupe secret key id\x00"), key...))
	return hex.EncodeToString(sum[:4])
}

// cipher returns the AEAD of the node's key and its ID.
func (s *PushSealer) cipher() (cipher.AEAD, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aead != nil {
		return s.aead, s.id, nil
	}
	key, err := s.key()
	if err != nil {
		return nil, "", fmt.Errorf("a2a: the node's secret key: %w", err)
	}
	if len(key) != SecretKeySize {
		return nil, "", fmt.Errorf("a2a: the node's secret key has %d bytes, want %d", len(key), SecretKeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, "", fmt.Errorf("a2a: the node's secret key: %w", err)
	}
	if s.aead, err = cipher.NewGCM(block); err != nil {
		return nil, "", fmt.Errorf("a2a: the node's secret key: %w", err)
	}
	s.id = KeyID(key)
	return s.aead, s.id, nil
}

// sealData is the additional data of the sealed secrets of task id's config.
func sealData(id sdk.TaskID, configID string) []byte {
	return []byte("a2a push\x00" + string(id) + "\x00" + configID)
}

// seal returns the sealed value of sec, for task id's config configID.
func (s *PushSealer) seal(id sdk.TaskID, configID string, sec pushSecrets) (string, error) {
	aead, keyID, err := s.cipher()
	if err != nil {
		return "", err
	}
	plain, err := json.Marshal(sec)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("a2a: sealing a push config's secrets: %w", err)
	}
	out := aead.Seal(nonce, nonce, plain, sealData(id, configID))
	return "v1." + keyID + "." + base64.RawURLEncoding.EncodeToString(out), nil
}

// open returns the secrets sealed in v for task id's config configID; its errors
// wrap ErrUndecryptable and never hold a secret.
func (s *PushSealer) open(id sdk.TaskID, configID, v string) (pushSecrets, error) {
	var sec pushSecrets
	version, rest, ok1 := strings.Cut(v, ".")
	keyID, body, ok2 := strings.Cut(rest, ".")
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if !ok1 || !ok2 || version != "v1" || err != nil {
		return sec, fmt.Errorf("%w: the sealed value is not one this build writes", ErrUndecryptable)
	}
	aead, own, err := s.cipher()
	if err != nil {
		return sec, fmt.Errorf("%w: %w", ErrUndecryptable, err)
	}
	if keyID != own {
		return sec, fmt.Errorf("%w: they were sealed with the key %s, this node has the key %s: give every node the same secret key (--secret-key-file, TROUPE_SECRET_KEY), or set the config again",
			ErrUndecryptable, keyID, own)
	}
	if len(raw) < aead.NonceSize() {
		return sec, fmt.Errorf("%w: the sealed value is too short", ErrUndecryptable)
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], sealData(id, configID))
	if err != nil {
		return sec, fmt.Errorf("%w: the sealed value does not open with the key %s: it was damaged, or sealed for another config", ErrUndecryptable, own)
	}
	if err := json.Unmarshal(plain, &sec); err != nil {
		return sec, fmt.Errorf("%w: the sealed value holds no secrets", ErrUndecryptable)
	}
	return sec, nil
}
