package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	kafkago "github.com/segmentio/kafka-go"
)

// Assignment is the set of a topic's partitions one group member owns in one generation.
type Assignment struct {
	Topic      string // as Subscribe was given it, without TopicLayout.Prefix
	Generation int32
	Partitions []int // owned by this member, sorted ascending; may be empty
	Total      int   // the topic's partition count
}

// RebalanceListener is told about ownership changes of a consumer-group subscription.
//
// The calls of one subscription (one Subscribe call) never overlap and come in
// order: Assigned of a generation, then its Revoked, then Assigned of the next one.
// A Subscriber's subscriptions share its listener, so calls for different
// subscriptions may be concurrent. Each call gets its own Partitions slice.
type RebalanceListener interface {
	// Assigned is called when a generation starts, before any message of it is delivered (also with no partitions).
	Assigned(a Assignment)
	// Revoked is called when that generation ends (a rebalance, a lost session, Close or the subscription's context ending),
	// after the generation's partition consumers stopped and flushed their offset commits, and before this member
	// joins the next generation. The group cannot complete the next rebalance until it returns (up to RebalanceTimeout),
	// so work stopped in Revoked is fenced from the partitions' next owner.
	//
	// Revoked runs in a function started with kafka-go's Generation.Start, and
	// kafka-go joins the next generation only after every such function returned
	// (kafka-go v0.4.51, consumergroup.go): ConsumerGroup.nextGeneration, once the
	// generation is done, calls Generation.close (lines 863-874), which waits until
	// the last function started while the generation was on has exited (lines
	// 344-360 and 375-412); only then does ConsumerGroup.run call nextGeneration
	// again (lines 722-733), whose first request to the coordinator is JoinGroup
	// (line 798), or, after Close, send LeaveGroup (lines 735-738). A function
	// started after the generation ended runs unwaited for (lines 387-390); the
	// subscription then skips the generation altogether.
	//
	// The coordinator completes a rebalance when every member rejoined, or evicts a
	// member that has not: after SessionTimeout without a heartbeat, or, heartbeats
	// or not, once RebalanceTimeout passed since the rebalance began. kafka-go sends
	// no heartbeat between the end of a generation and the next JoinGroup (its
	// heartbeat loop is one of the generation's functions), so the subscription
	// sends them itself while Revoked runs (keepAlive): every HeartbeatInterval,
	// with the ending generation's ID and member ID. A coordinator preparing a
	// rebalance answers them REBALANCE_IN_PROGRESS but resets the member's session
	// timer (Kafka's classic group protocol, GroupCoordinator.handleHeartbeat; kfake
	// does the same), so a Revoked that takes longer than SessionTimeout keeps the
	// member. RebalanceTimeout still bounds it: an evicted member's partitions go to
	// the others without waiting for its Revoked, so Revoked must return well within
	// RebalanceTimeout (less a heartbeat interval, the time the generation's
	// consumers take to stop, and the JoinGroup's trip).
	Revoked(a Assignment)
}

// runGeneration runs one generation of the group: it tells the listener about the
// assignment, starts a consumer for every assigned partition and a watcher that
// tells the listener when the generation ended. All of them run as functions of
// gen.Start, so kafka-go joins the next generation only after they returned. The
// consumers and the watcher are counted in running until they stopped.
func (sub *subscription) runGeneration(ctx context.Context, gen *kafkago.Generation, running *sync.WaitGroup) {
	assigned := gen.Assignments[sub.wire]
	partitions := make([]int, 0, len(assigned))
	for _, pa := range assigned {
		partitions = append(partitions, pa.ID)
	}
	slices.Sort(partitions)
	if sub.sticky != nil {
		sub.sticky.hold(gen.ID, sub.wire, partitions) // claimed at the next join
	}
	fields := watermill.LogFields{"generation": gen.ID, "member": gen.MemberID, "partitions": partitions}
	listener := sub.s.cfg.Rebalance

	// The watcher starts first. kafka-go waits only for functions started while the
	// generation was still on (a function started later runs untracked), so when it
	// finds the generation over already, nothing of the generation runs: no
	// Assigned, no consumer, no Revoked.
	var (
		parts   sync.WaitGroup              // this generation's partition consumers
		live    = make(chan bool, 1)        // whether the generation was on when the watcher started
		started = make(chan *Assignment, 1) // after Assigned and parts.Add; nil: give the generation up
	)
	running.Add(1)
	gen.Start(func(gctx context.Context) {
		if gctx.Err() != nil {
			running.Done()
			live <- false
			return
		}
		live <- true
		a := <-started
		if a == nil {
			running.Done()
			return // ends the generation; kafka-go joins again
		}
		select {
		case <-gctx.Done():
		case <-ctx.Done():
		}
		// kafka-go's heartbeat loop is one of the generation's functions: from
		// here until Revoked returned and kafka-go joins again, the member
		// heartbeats only through keepAlive.
		stop := sub.keepAlive(gen, fields)
		parts.Wait()
		sub.logger.Debug("consumer group: generation ended", fields)
		if listener != nil {
			listener.Revoked(*a)
		}
		stop()
		running.Done()
		// The generation ends when the group does (a rebalance, Close): a watcher
		// that returned would end it early, e.g. on a subscription context that ended
		// while the group is still being closed.
		<-gctx.Done()
	})
	if !<-live {
		sub.logger.Debug("consumer group: generation ended before it started", fields)
		return
	}

	a := Assignment{Topic: sub.topic, Generation: gen.ID, Partitions: partitions}
	if listener != nil {
		atLeast := 1
		if len(partitions) > 0 {
			atLeast = partitions[len(partitions)-1] + 1
		}
		lookup, cancel := context.WithTimeout(ctx, sub.s.cfg.CoordinatorTimeout)
		total, err := sub.s.partitionCount(lookup, sub.wire, atLeast)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				sub.logger.Error("consumer group: partition count unknown, giving the generation up to join again", err, fields)
			}
			started <- nil
			return
		}
		a.Total = total
		listener.Assigned(Assignment{Topic: a.Topic, Generation: a.Generation, Partitions: slices.Clone(partitions), Total: a.Total})
	}
	sub.logger.Debug("consumer group: generation started", fields)
	commits := newCommitter(gen, sub.wire)
	for _, pa := range assigned {
		parts.Add(1)
		running.Add(1)
		gen.Start(func(gctx context.Context) {
			defer running.Done()
			defer parts.Done()
			sub.consume(ctx, gctx, commits, pa.ID, pa.Offset)
		})
	}
	started <- &a
}

// partitionCount reads the partition count of topic (a Kafka name) from a broker,
// as kafka-go's group leader does to assign partitions: over a connection of its
// own, not from the transport's metadata cache, which can be seconds old when
// partitions were just added. Its metadata request lets a broker with auto.create.topics.enable
// create the topic, as kafka-go's group does anyway. It waits (until ctx is done)
// for a count of at least atLeast, since one broker's metadata can lag another's.
func (s *Subscriber) partitionCount(ctx context.Context, topic string, atLeast int) (int, error) {
	wait := 50 * time.Millisecond
	for {
		var err error
		for _, broker := range s.cfg.Brokers {
			var parts []kafkago.Partition
			parts, err = s.dialer.LookupPartitions(ctx, "tcp", broker, topic)
			if err == nil && len(parts) >= atLeast {
				return len(parts), nil
			}
			if err == nil {
				err = fmt.Errorf("broker %s knows %d partitions, fewer than %d", broker, len(parts), atLeast)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("kafka: partition count of topic %s: %w (waited until %w)", topic, err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// keepAlive heartbeats for gen's member, every HeartbeatInterval, from the end of
// the generation until the returned stop is called (once Revoked returned), so
// that the coordinator does not evict the member while the subscription hands
// its partitions over (see RebalanceListener.Revoked): kafka-go's own heartbeats
// stopped with the generation. The first one goes out a HeartbeatInterval after
// the generation ended, so a quick Revoked sends none. It stops early when the
// coordinator no longer knows the member or the generation: the member was
// evicted (after RebalanceTimeout, or after a lost session), and its partitions
// may be another member's already; that is logged.
func (sub *subscription) keepAlive(gen *kafkago.Generation, fields watermill.LogFields) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	client := sub.s.admin.client
	go func() {
		defer close(done)
		t := time.NewTicker(sub.s.cfg.HeartbeatInterval)
		defer t.Stop()
		var (
			coordinator net.Addr // nil: to find
			sent        int
		)
		for {
			select {
			case <-ctx.Done():
				if sent > 0 {
					sub.logger.Debug("consumer group: kept the member alive while the generation ended",
						fields.Add(watermill.LogFields{"heartbeats": sent}))
				}
				return
			case <-t.C:
			}
			if coordinator == nil {
				res, err := client.FindCoordinator(ctx, &kafkago.FindCoordinatorRequest{Key: gen.GroupID, KeyType: kafkago.CoordinatorKeyTypeConsumer})
				if err == nil {
					err = res.Error
				}
				if err != nil {
					if ctx.Err() == nil {
						sub.logger.Debug("consumer group: no coordinator to heartbeat to while the generation ends", fields.Add(watermill.LogFields{"err": err}))
					}
					continue
				}
				coordinator = kafkago.TCP(net.JoinHostPort(res.Coordinator.Host, strconv.Itoa(res.Coordinator.Port)))
			}
			res, err := client.Heartbeat(ctx, &kafkago.HeartbeatRequest{
				Addr: coordinator, GroupID: gen.GroupID, GenerationID: gen.ID, MemberID: gen.MemberID,
			})
			if err == nil {
				err = res.Error
			}
			switch {
			case err == nil, errors.Is(err, kafkago.RebalanceInProgress):
				sent++
			case errors.Is(err, kafkago.UnknownMemberId), errors.Is(err, kafkago.IllegalGeneration), errors.Is(err, kafkago.FencedInstanceID):
				sub.logger.Info("consumer group: the coordinator no longer knows the member or its generation while the generation's end is handled "+
					"(evicted: a lost session, or Revoked past RebalanceTimeout); its partitions may be another member's already",
					fields.Add(watermill.LogFields{"err": err}))
				return
			default:
				if ctx.Err() == nil {
					sub.logger.Debug("consumer group: heartbeat while the generation ends failed", fields.Add(watermill.LogFields{"err": err}))
				}
				coordinator = nil // maybe moved: found again at the next tick
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
