package mcp

import (
	"context"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// InProcess returns a ServerConfig.Transport that reaches srv, a go-sdk server in
// this process: each connection is a new pair of in-memory transports (the go-sdk's
// NewInMemoryTransports), srv serving one end until the client closes the other.
func InProcess(srv *sdk.Server) func() sdk.Transport {
	return func() sdk.Transport {
		st, ct := sdk.NewInMemoryTransports()
		if _, err := srv.Connect(context.Background(), st, nil); err != nil {
			return failedTransport{fmt.Errorf("mcp: in-process server: %w", err)}
		}
		return ct
	}
}

// failedTransport is a transport whose connection failed before it was made.
type failedTransport struct{ err error }

func (t failedTransport) Connect(context.Context) (sdk.Connection, error) { return nil, t.err }
