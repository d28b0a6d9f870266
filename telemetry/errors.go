package telemetry

import (
	"log/slog"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
)

// LogErrors sends what OpenTelemetry reports to logger: what fails in the
// background (a collector down or refusing the spans, with its answer's body,
// which its global error handler would print with the standard log package), and
// what its own logger says (a malformed OTEL_* setting, with its value: a header's,
// a secret). Give it a redacting logger (redact.NewHandler, knowing EnvSecrets).
// It sets OpenTelemetry's globals: a command calls it once, before it exports.
func LogErrors(logger *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("traces: the exporter failed: spans may be lost", "err", err)
	}))
	otel.SetLogger(logr.FromSlogHandler(logger.With("component", "opentelemetry").Handler()))
}
