package natsnode

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// serverLogger adapts slog to the nats-server Logger interface. The server is chatty at its
// notice level (every route, every Raft group), so notices go to Debug; warnings and errors keep
// their level. A fatal message would make a stand-alone server exit; here it is logged as an
// error and reported on fatal, so that Start can fail instead of returning a half-started server.
type serverLogger struct {
	log   *slog.Logger
	fatal chan error // first fatal message; buffered, never blocks the server
}

func newServerLogger(log *slog.Logger) *serverLogger {
	return &serverLogger{log: log, fatal: make(chan error, 1)}
}

func (l *serverLogger) emit(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if l.log.Enabled(ctx, level) {
		l.log.Log(ctx, level, fmt.Sprintf(format, v...))
	}
}

func (l *serverLogger) Noticef(format string, v ...any) { l.emit(slog.LevelDebug, format, v) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.emit(slog.LevelWarn, format, v) }
func (l *serverLogger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if strings.Contains(msg, "authentication error") || strings.Contains(msg, "TLS route handshake error") {
		// A route or client that failed authentication: a stranger, or a node with another
		// secret or certificate. Said plainly, not only in the server's words.
		l.log.Error("refused a NATS connection that failed authentication: not an mlstream node of this cluster (or one with another --cluster-secret or certificate), or a client without valid credentials",
			"server_message", msg)
		return
	}
	l.log.Error(msg)
}
func (l *serverLogger) Debugf(format string, v ...any) { l.emit(slog.LevelDebug, format, v) }
func (l *serverLogger) Tracef(format string, v ...any) { l.emit(slog.LevelDebug, format, v) }

func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error("fatal: " + msg)
	select {
	case l.fatal <- fmt.Errorf("natsnode: nats-server: %s", msg):
	default:
	}
}
