package llm

import (
	"errors"
	"fmt"
	"time"
)

// APIError is a provider's refusal or failure, as an HTTP API reports it. Providers
// return it (wrapped) so that the gateway can decide whether to retry, when, and
// whether to fall back to another model.
type APIError struct {
	Provider   string
	Model      string
	StatusCode int
	// RetryAfter is the provider's Retry-After hint; 0 when it gave none.
	RetryAfter time.Duration
	Message    string
	// Code is the provider's error code (OpenAI's error.code, else error.type), e.g.
	// "insufficient_quota"; empty when it gave none.
	Code string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("llm: %s %s: HTTP %d", e.Provider, e.Model, e.StatusCode)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Transient reports whether retrying the same request may succeed: 408, 409, 429 and
// 5xx are transient; other 4xx (bad request, auth, not found) are not, nor is a 429
// of an account out of credits (OpenAI's code insufficient_quota, Zhipu's 1113),
// which no retry gets past before someone pays.
func (e *APIError) Transient() bool {
	switch {
	case e.StatusCode == 429 && (e.Code == CodeInsufficientQuota || e.Code == codeZhipuInArrears):
		return false
	case e.StatusCode == 408, e.StatusCode == 409, e.StatusCode == 429, e.StatusCode >= 500:
		return true
	}
	return false
}

// CodeInsufficientQuota is the APIError.Code of an account out of credits (OpenAI
// answers it with a 429).
const CodeInsufficientQuota = "insufficient_quota"

// codeZhipuInArrears is Zhipu's code of an account in arrears (with a 429).
const codeZhipuInArrears = "1113"

// Is makes errors.Is(err, ErrTransient) true for transient API errors.
func (e *APIError) Is(target error) bool {
	return target == ErrTransient && e.Transient()
}

// RetryAfter returns the Retry-After hint carried by err, if any.
func RetryAfter(err error) (time.Duration, bool) {
	var api *APIError
	if errors.As(err, &api) && api.RetryAfter > 0 {
		return api.RetryAfter, true
	}
	return 0, false
}
