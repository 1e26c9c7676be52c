package iceberg

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"

	"github.com/apache/iceberg-go/catalog"
)

// Permanent reports whether err is a catalog's refusal that no retry
// fixes (sink.Classifier): the REST catalog answered 401 Unauthorized or
// 403 Forbidden (a bearer token that was revoked or never valid, a
// principal without the privilege), or its OAuth2 token endpoint refused
// the client's credentials (RFC 6749 errors invalid_client,
// invalid_grant, unauthorized_client, invalid_scope, invalid_request,
// unsupported_grant_type). Run then returns the error at once instead of
// retrying it for its budget. A token endpoint that can't be reached, a
// 419 (authorization expired: the client fetches a new token) and a
// server error stay retryable.
//
// The errors are iceberg-go's catalog/rest errors, recognized by the
// text of the sentinel values in err's chain, so that this package does
// not link the REST client (and the AWS SDK it brings) into programs
// that use another catalog.
func (d *Destination) Permanent(err error) bool {
	return catalogRefused(err)
}

// The texts of iceberg-go's rest.ErrUnauthorized, rest.ErrForbidden and
// rest.ErrOAuthError (v0.7.0; the package's tests compare them with the
// values, so an upgrade that changes them fails there).
const (
	restUnauthorized = "REST error: unauthorized"
	restForbidden    = "REST error: forbidden"
	restOAuth        = "REST error: oauth error"
)

// oauthRefusals are the token endpoint's error codes that mean the
// client's own request or credentials are wrong (RFC 6749, 5.2).
var oauthRefusals = []string{"invalid_request", "invalid_client", "invalid_grant", "unauthorized_client",
	"unsupported_grant_type", "invalid_scope"}

func catalogRefused(err error) bool {
	for err != nil {
		switch err.Error() {
		case restUnauthorized, restForbidden:
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if catalogRefused(e) {
					return true
				}
			}
			return false
		case interface{ Unwrap() error }:
			next := u.Unwrap()
			// The token endpoint's error: its text is the code (and a
			// description), and it unwraps to ErrOAuthError itself.
			if next != nil && next.Error() == restOAuth {
				msg := err.Error()
				for _, code := range oauthRefusals {
					if msg == code || strings.HasPrefix(msg, code+":") || strings.HasPrefix(msg, code+" (") {
						return true
					}
				}
			}
			err = next
		default:
			return false
		}
	}
	return false
}

// The texts of iceberg-go's rest.ErrServiceUnavailable,
// rest.ErrServerError, rest.ErrCommitStateUnknown and
// rest.ErrAuthorizationExpired (v0.7.0).
const (
	restUnavailable  = "REST error: service unavailable"
	restServerError  = "REST error: server error"
	restStateUnknown = "REST error: commit failed due to unknown reason"
	restAuthExpired  = "REST error: authorization expired"
)

// mayRefuseProps reports whether a failed commit that set the pipeline's
// table properties may have failed because the catalog refuses them, so
// that FenceAuto tries it again with its markers in a snapshot summary
// and, if that is taken, keeps them there. A failure that says nothing
// about the request's content can't be such a refusal: a network error,
// a cancelled or expired context, a catalog that is down or failed
// (5xx, a commit whose outcome is unknown), and an authorization the
// catalog refused or let expire. Those are returned as they are, to be
// retried as the same commit, so that one outage doesn't move a table's
// markers out of its properties for the rest of the process.
func mayRefuseProps(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || catalogRefused(err) {
		return false
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return false
	}
	return !chainText(err, restUnavailable, restServerError, restStateUnknown, restAuthExpired)
}

// mayRefuse reports whether err, from a commit that set the pipeline's
// table properties, may be the catalog refusing them (mayRefuseProps):
// never on a SQL catalog, which keeps any property, so that a database
// that is briefly busy or away doesn't move the markers.
func (d *Destination) mayRefuse(err error) bool {
	return d.cat.CatalogType() != catalog.SQL && mayRefuseProps(err)
}

// chainText reports whether an error in err's chain (or tree) has one of
// texts as its whole text.
func chainText(err error, texts ...string) bool {
	if err == nil {
		return false
	}
	if slices.Contains(texts, err.Error()) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if chainText(e, texts...) {
				return true
			}
		}
	case interface{ Unwrap() error }:
		return chainText(u.Unwrap(), texts...)
	}
	return false
}
