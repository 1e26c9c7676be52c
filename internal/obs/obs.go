// Package obs gives connectors spans of their own I/O as children of the
// runner's spans, at no cost when nobody traces: the tracer comes from
// the span in the context, so it is the host's provider (etl's
// Builder.Telemetry), and without a recording span in the context
// nothing is started.
package obs

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

const tracerName = "github.com/openetl/etl"

// Start starts a child span of the span in ctx, named name (by
// convention "openetl.<connector>.<operation>"), or returns ctx and a
// non-recording span when ctx holds no recording span.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(tracerName).Start(ctx, name, trace.WithAttributes(attrs...))
}

// End records err on span, if any, and ends it. Ending the
// non-recording span Start returns without a parent does nothing.
func End(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
