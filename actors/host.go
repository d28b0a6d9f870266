package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// SessionHost spawns one SessionActor per session on its first message, routes every
// session-addressed message to it, and stops it when it reports idle. It is the
// supervisor of the session actors: a session that panics is restarted and refolds
// its events, up to 5 times in 10 s; past that it is stopped, and the session stays
// resumable in the log (a later message or node start wakes it again).
type SessionHost struct {
	deps     *SessionDeps
	sessions map[string]*hosted
	byPID    map[string]string
}

type hosted struct {
	pid       *actor.PID
	forwarded int
}

// NewSessionHostProps returns the props of a SessionHost.
func NewSessionHostProps(deps SessionDeps) *actor.Props {
	deps.withDefaults()
	d := &deps
	return actor.PropsFromProducer(func() actor.Actor {
		return &SessionHost{deps: d, sessions: map[string]*hosted{}, byPID: map[string]string{}}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(5, 10*time.Second, actor.DefaultDecider)))
}

// CountSessions asks a SessionHost how many session actors are alive; the reply is an int.
type CountSessions struct{}

// Receive implements actor.Actor.
func (h *SessionHost) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *CountSessions:
		ctx.Respond(len(h.sessions))
	case *SubmitTask:
		h.forward(ctx, m.Envelope.SessionID)
	case *CancelTask:
		h.forward(ctx, m.SessionID)
	case *ResumeSession:
		h.forward(ctx, m.SessionID)
	case *passivate:
		id, ok := h.byPID[ctx.Sender().Id]
		if !ok {
			return
		}
		if s := h.sessions[id]; s.forwarded == m.handled {
			delete(h.sessions, id)
			delete(h.byPID, s.pid.Id)
			ctx.Stop(s.pid)
		}
	case *actor.Terminated:
		if id, ok := h.byPID[m.Who.Id]; ok {
			delete(h.sessions, id)
			delete(h.byPID, m.Who.Id)
		}
	}
}

func (h *SessionHost) forward(ctx actor.Context, id string) {
	s, ok := h.sessions[id]
	if !ok {
		deps := h.deps
		props := actor.PropsFromProducer(func() actor.Actor { return newSessionActor(id, deps) })
		pid := ctx.Spawn(props)
		s = &hosted{pid: pid}
		h.sessions[id] = s
		h.byPID[pid.Id] = id
	}
	s.forwarded++
	ctx.Forward(s.pid)
}
