package a2a

import (
	"net/http"
	"time"

	"github.com/troupe-run/troupe/internal/ssekeepalive"
)

// DefaultKeepAlive is how long a stream stays silent before the server writes an
// SSE comment (": keep-alive") on it. It is shorter than the 5 s the A2A Python
// SDK's HTTP client (httpx's default timeout) waits for the next byte of a stream:
// a model call or a tool that takes longer than that would end its stream.
const DefaultKeepAlive = 2 * time.Second

// keepAlive returns w, wrapped to write an SSE comment on its stream when it was
// silent for every (between events only), and a function to call when the
// handler returned.
func keepAlive(w http.ResponseWriter, every time.Duration) (http.ResponseWriter, func()) {
	return ssekeepalive.Wrap(w, every)
}
