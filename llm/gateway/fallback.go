package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/troupe-run/troupe/llm"
)

// Fallback tries the model it wraps, then each of backups in order, until one answers.
// Any error falls over to the next model, a permanent one (a 4xx) as well as a
// transient one whose retries are spent: another provider may take what this one
// refused. A cancelled context does not: the error is returned at once, wrapping
// ctx.Err(). An answer from a backup whose name differs from the wrapped model's has
// Model set to the backup's name. When every model failed, the error wraps
// ErrAllFailed and each model's error. The Usage it returns, answer or failure, is
// that of every model it tried (llm.Model), each priced as its own (Pricing).
func Fallback(logger *slog.Logger, backups ...llm.Model) Middleware {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return func(primary llm.Model) llm.Model {
		if len(backups) == 0 {
			return primary
		}
		return &fallback{name: primary.Name(), chain: append([]llm.Model{primary}, backups...), logger: logger}
	}
}

type fallback struct {
	name   string
	chain  []llm.Model
	logger *slog.Logger
}

func (f *fallback) Name() string { return f.name }

func (f *fallback) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	errs := make([]error, 0, len(f.chain))
	var spent llm.Response // the Usage of the models tried so far (llm.Model)
	for i, m := range f.chain {
		// A model with a fallback after it does not wait for its provider's
		// cooldown (Cooldown): the next model may answer at once.
		resp, err := m.Generate(withFollowed(ctx, i < len(f.chain)-1), req)
		spent.Usage = spent.Usage.Add(resp.Usage)
		if err == nil {
			if name := m.Name(); name != f.name {
				resp.Model = name
			}
			resp.Usage = spent.Usage
			return resp, nil
		}
		if ctx.Err() != nil {
			return spent, stopped(ctx, err)
		}
		errs = append(errs, err)
		if i < len(f.chain)-1 {
			f.logger.Warn("model failed, falling back", "model", m.Name(), "next", f.chain[i+1].Name(), "err", err)
		}
	}
	return spent, fmt.Errorf("%w: %w", ErrAllFailed, errors.Join(errs...))
}
