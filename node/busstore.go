package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/troupe-run/troupe/messages"
)

// BusStatus is the status the session listings give a stream that holds a message
// too large for the bus (messages.BusStored): a stream of the log, but no session.
const BusStatus = "bus-message"

// IsBusStream reports whether a stream of the log holds a message too large for the bus.
func IsBusStream(id string) bool { return strings.HasPrefix(id, messages.BusStreamPrefix) }

// effectMessageMax bounds the encoded effect request or reply, or task, that goes on
// the bus as it is, under the 1 MiB a Kafka message holds by default, as
// memoryMessageMax does for memory commands. A larger one (a model call with a long
// conversation, a model's very long answer, a long task) is stored in the log and
// travels as a reference that names its stream (messages.BusStored): without it, the bus
// refused a large reply on every retry while the session waited on its call, and a
// large task was refused to its client.
const effectMessageMax = messages.BusMessageMax

// storeEffect stores command, the encoded request or reply of kind for key, in its
// stream of the log (storeMessage) and returns the stream.
func (n *Node) storeEffect(ctx context.Context, kind string, key messages.EffectKey, command []byte) (string, error) {
	return n.storeMessage(ctx, messages.EffectStream(kind, key), command)
}

// storeMessage stores b in stream, unless the stream holds a message already (an
// earlier issue or performance of the key, an earlier publish of the task: the
// first stays, so that every reference names one message), and returns the stream.
func (n *Node) storeMessage(ctx context.Context, stream string, b []byte) (string, error) {
	e, err := messages.BusStoredEvent(stream, b, n.cfg.Clock.Now().UnixMicro())
	if err != nil {
		return "", err
	}
	if err := n.log.Append(ctx, []messages.Envelope{e}); err != nil {
		// The stream's one event has the stream's ID: a store of other bytes
		// under it is a no-op or a conflict, and the stored one is what references name.
		events, rerr := n.log.Read(ctx, stream, 1)
		if rerr != nil || len(events) == 0 {
			return "", fmt.Errorf("store a message too large for the bus in %s: %w", stream, err)
		}
	}
	return stream, nil
}

// loadMessage reads the message a reference names from the log.
func (n *Node) loadMessage(ctx context.Context, stream string) ([]byte, error) {
	events, err := n.log.Read(ctx, stream, 1)
	if err != nil {
		return nil, fmt.Errorf("read the stored message %s: %w", stream, err)
	}
	return messages.BusStoredMessage(stream, events)
}

// fullRequest returns the request a reference stands for, read from the log; any other
// request as it is.
func (n *Node) fullRequest(ctx context.Context, req messages.EffectRequest) (messages.EffectRequest, error) {
	if req.Stored == "" {
		return req, nil
	}
	b, err := n.loadMessage(ctx, req.Stored)
	if err != nil {
		return req, err
	}
	full, err := messages.DecodeEffectRequest(b)
	if err != nil {
		return req, fmt.Errorf("%w: stored effect request %s: %w", errPermanent, req.Stored, err)
	}
	if full.Key != req.Key || full.Stored != "" {
		return req, fmt.Errorf("%w: stored effect request %s holds the request of %s", errPermanent, req.Stored, full.Key)
	}
	// The reference says where to answer: the node that issued it this time.
	full.ReplyTopic, full.ReplyNode = req.ReplyTopic, req.ReplyNode
	return full, nil
}

// fullReply returns the reply a reference stands for, read from the log; any other
// reply as it is.
func (n *Node) fullReply(ctx context.Context, rep messages.EffectReply) (messages.EffectReply, error) {
	if rep.Stored == "" {
		return rep, nil
	}
	b, err := n.loadMessage(ctx, rep.Stored)
	if err != nil {
		return rep, err
	}
	full, err := messages.DecodeEffectReply(b)
	if err != nil {
		return rep, fmt.Errorf("stored effect reply %s: %w", rep.Stored, err)
	}
	if full.Key != rep.Key || full.Stored != "" {
		return rep, fmt.Errorf("stored effect reply %s holds the reply of %s", rep.Stored, full.Key)
	}
	return full, nil
}

// replyRef is the reference of the reply to req stored in stream.
func replyRef(req messages.EffectRequest, stream string) ([]byte, error) {
	return messages.EncodeCommand(&messages.EffectReply{SessionID: req.SessionID, Key: req.Key, Stored: stream})
}

// eventAt reads the event of a session at seq from the log.
func (n *Node) eventAt(ctx context.Context, sessionID string, seq uint64) (messages.Envelope, error) {
	events, err := n.log.Read(ctx, sessionID, seq)
	if err != nil {
		return messages.Envelope{}, err
	}
	if len(events) == 0 || events[0].Seq != seq {
		return messages.Envelope{}, fmt.Errorf("the log has no event %d of session %s", seq, sessionID)
	}
	return events[0], nil
}

// storedTask reads the envelope of a task too large for the bus from the stream its
// reference's header names (messages.MetaStored).
func (n *Node) storedTask(ctx context.Context, stream string) ([]byte, error) {
	if !strings.HasPrefix(stream, messages.BusStream(messages.BusStoredTask, "")) {
		return nil, fmt.Errorf("%w: the header %s names %s, not a stored task", errPermanent, messages.MetaStored, QuoteHead(stream))
	}
	events, err := n.log.Read(ctx, stream, 1)
	if err != nil {
		return nil, fmt.Errorf("read the stored message %s: %w", stream, err) // retried
	}
	if len(events) == 0 {
		// A node stores a task in the shared log before it publishes the reference,
		// so a reference read from a log that answers names a stream that will never
		// be there: a record copied from another cluster, or sent back from
		// troupe.poison with its headers, or read again after --stored-retention
		// pruned its message. Retried, it held its session, then its partition, for
		// good.
		return nil, fmt.Errorf("%w: the header %s names %s, a stored task this node's event log does not hold (another cluster's, or pruned after the stored retention)",
			errPermanent, messages.MetaStored, QuoteHead(stream))
	}
	b, err := messages.BusStoredMessage(stream, events)
	if errors.Is(err, messages.ErrCorrupt) || err == nil && len(b) == 0 {
		return nil, fmt.Errorf("%w: %w", errPermanent, err)
	}
	return b, err
}

// taskRef is the message of a task whose envelope b is too large for the bus: b is
// stored in the log, and the message holds env without its payload, with the header
// messages.MetaStored naming the stream.
func (n *Node) taskRef(ctx context.Context, env messages.Envelope, b []byte) (*message.Message, error) {
	stream, err := n.storeMessage(ctx, messages.BusStream(messages.BusStoredTask, env.ID), b)
	if err != nil {
		// What the client can act on: the size, and that the log is down, not
		// the stream's name.
		return nil, fmt.Errorf("the task, of %d bytes, is larger than a bus message (%d KiB), so it goes through the event log, "+
			"but the event log cannot write (smaller tasks still go on the bus): %w", len(b), messages.BusMessageMax>>10, err)
	}
	env.Payload = json.RawMessage("{}")
	reference, err := messages.Marshal(env)
	if err != nil {
		return nil, err
	}
	msg := message.NewMessage(env.ID, reference)
	msg.Metadata.Set(messages.MetaStored, stream)
	return msg, nil
}
