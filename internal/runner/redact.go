package runner

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
)

// The forms a secret takes in a DSN, a config printed with %+v or an
// error message: a URL's password (scheme://user:secret@host), a
// key=value pair (password=secret, as in libpq and ODBC strings) and a
// key: value pair (Password:secret from %+v, "password": "secret" in
// JSON).
var (
	urlPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*):[^@\s]*@`)
	// user:secret@tcp(host:port)/db, the MySQL driver's DSN.
	mysqlPassword = regexp.MustCompile(`((?:^|[\s"'=])[^:@\s"'=/]+):[^@\s]*@(tcp|unix|udp)\(`)
	kvPassword    = regexp.MustCompile(`(?i)\b(\w*(?:pass(?:word|wd)?|pwd|secret|token|api_?key|access_?key)\w*)(\s*=\s*)('[^']*'|"[^"]*"|[^\s;&,]*)`)
	colPassword   = regexp.MustCompile(`(?i)\b(\w*(?:pass(?:word|wd)?|secret|api_?key|access_?key)\w*)("?\s*:\s*)("[^"]*"|[^\s,})\]]*)`)
)

// redacted replaces a secret.
const redacted = "xxxxx"

// RedactSecrets returns s with passwords and similar secrets replaced by
// "xxxxx": the password of a URL (postgres://user:secret@host), the value
// of password=, pwd=, secret=, token=, api_key=, access_key= pairs, and
// of Password: / "password": fields as %+v and JSON print them. The
// runner passes every log attribute, event error and status error
// through it; connectors should use it (or never print secrets) in
// their configs' String methods and errors.
func RedactSecrets(s string) string {
	s = urlPassword.ReplaceAllString(s, "${1}:"+redacted+"@")
	s = mysqlPassword.ReplaceAllString(s, "${1}:"+redacted+"@${2}(")
	s = kvPassword.ReplaceAllString(s, "${1}${2}"+redacted)
	s = colPassword.ReplaceAllStringFunc(s, func(m string) string {
		sub := colPassword.FindStringSubmatch(m)
		if v := sub[3]; v == "YES" || v == "NO" {
			// MySQL's "Access denied for user 'app'@'host' (using
			// password: YES)" says whether one was sent, not what.
			return m
		}
		return sub[1] + sub[2] + redacted
	})
	return s
}

// redactedError is an error whose message is redacted; errors.Is and
// errors.As see the original.
type redactedError struct{ err error }

func (e redactedError) Error() string { return RedactSecrets(e.err.Error()) }
func (e redactedError) Unwrap() error { return e.err }

// redactErr wraps err so that printing it shows no secrets.
func redactErr(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(redactedError); ok {
		return err
	}
	return redactedError{err}
}

// redactHandler is a slog.Handler that redacts secrets in the message
// and in every string, error and formatted value before the host's
// handler sees them.
type redactHandler struct{ inner slog.Handler }

func newRedactHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(redactHandler); ok {
		return h
	}
	return redactHandler{h}
}

func (h redactHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h redactHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, RedactSecrets(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return h.inner.Handle(ctx, out)
}

func (h redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = redactAttr(a)
	}
	return redactHandler{h.inner.WithAttrs(red)}
}

func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{h.inner.WithGroup(name)}
}

func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, RedactSecrets(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, x := range g {
			red[i] = redactAttr(x)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.Any(a.Key, redactErr(x))
		case nil:
			return slog.Attr{Key: a.Key, Value: v}
		default:
			return slog.String(a.Key, RedactSecrets(fmt.Sprintf("%+v", x)))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// RedactingLogger returns a logger that passes every message and
// attribute of l through RedactSecrets before l's handler sees them; the
// runner wraps Config.Logger with it.
func RedactingLogger(l *slog.Logger) *slog.Logger {
	return slog.New(newRedactHandler(l.Handler()))
}
