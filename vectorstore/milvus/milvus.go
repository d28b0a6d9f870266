package milvus

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	grpc_retry "github.com/grpc-ecosystem/go-grpc-middleware/retry"
	"github.com/milvus-io/milvus-proto/go-api/v2/milvuspb"
	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/troupe-run/troupe/vectorstore"
)

// Limits of Milvus 2.3 that the Store checks before it writes, so that a request
// beyond them fails with vectorstore.ErrInvalid and changes nothing.
const (
	// maxName is the longest collection name (proxy.maxNameLength).
	maxName = 255
	// maxVarChar is the largest max_length of a VarChar field: the longest ID and Text.
	maxVarChar = 65535
	// maxJSON is the largest JSON value: the encoded metadata of one item.
	maxJSON = 65536
	// maxDim is the largest vector dimension (proxy.maxDimension).
	maxDim = 32768
	// maxTopK is the most hits one search returns: the largest Query.K.
	maxTopK = 16384
)

// tieEpsilon is how close (in Milvus's float32 score) the last hit a search fetched
// must be to the K-th for the Store to fetch more: items tied with the K-th may lie
// beyond what Milvus returned, and the contract breaks ties by ID.
const tieEpsilon = 1e-4

// Store is a vectorstore.Store on a Milvus server. Build it with New; it is safe for
// concurrent use.
type Store struct {
	cfg    Config
	client client.Client
	level  entity.ConsistencyLevel

	mu     sync.RWMutex // guards closed, and client while New sets it
	closed bool

	// answered is when the server last answered a request (UnixNano); checking
	// serializes the checks of the connection (check); socks holds the sockets
	// gRPC dialled and has not closed.
	answered atomic.Int64
	checking sync.Mutex
	sockMu   sync.Mutex
	socks    map[*socket]struct{}

	cmu   sync.Mutex             // guards colls and loading
	colls map[string]*collection // by the caller's name: collections known to exist
	// loading holds, by the caller's name, when this Store first found each
	// collection not loaded and asked the server to load it (see awaitLoad).
	loading map[string]time.Time
	// loadWait bounds the wait for the load of a collection the Store did not create
	// (loadWait, changed by tests).
	loadWait time.Duration

	createMu sync.Mutex // serializes the creation of collections
}

// collection is what the Store knows of an existing Milvus collection.
type collection struct {
	name string // in Milvus
	dim  int
	// loaded is set once the server said the collection is loaded: searches wait
	// for it (awaitLoad), writes do not. created is set when this Store created it.
	loaded  atomic.Bool
	created atomic.Bool
	// written is set once this Store has written to the collection: from then on, a
	// Session search waits for this Store's writes (the SDK keeps their timestamps).
	// Before, it has none to wait for, so it is made Strong to see other writers'.
	written atomic.Bool
}

var _ vectorstore.Store = (*Store)(nil)

// ErrUnreachable is what New's error wraps when no Milvus server answered at the
// address: a fault of the service, not of the configuration.
var ErrUnreachable = errors.New("vectorstore/milvus: server unreachable")

// unreachable is an error of the connection that is also ErrUnreachable, with the
// connection's message.
type unreachable struct{ err error }

func (e unreachable) Error() string   { return e.err.Error() }
func (e unreachable) Unwrap() []error { return []error{ErrUnreachable, e.err} }

// New connects to the server of cfg. It fails if cfg is invalid or the server does not
// answer within cfg.DialTimeout (or before ctx ends).
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	s := &Store{cfg: cfg, level: levels[cfg.Consistency], colls: make(map[string]*collection), socks: map[*socket]struct{}{},
		loading: map[string]time.Time{}, loadWait: loadWait}
	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	c, err := client.NewClient(dctx, client.Config{
		Address:     cfg.Addr,
		Username:    cfg.Username,
		Password:    cfg.Password,
		DBName:      cfg.DB,
		DialOptions: append(dialOptions(), grpc.WithContextDialer(s.dialSocket), grpc.WithChainUnaryInterceptor(s.watch)),
	})
	if err != nil {
		if ctx.Err() == nil && dctx.Err() != nil {
			// gRPC reports only the deadline, not why it could not connect.
			return nil, fmt.Errorf("vectorstore/milvus: connect to %s: no answer within %s (is Milvus running and listening there?): %w", cfg.Addr, cfg.DialTimeout,
				unreachable{err})
		}
		return nil, fmt.Errorf("vectorstore/milvus: connect to %s: %w", cfg.Addr, err)
	}
	s.mu.Lock()
	s.client = c
	s.mu.Unlock()
	return s, nil
}

// A connection can die without a word: a NAT or proxy that forgets it drops its
// packets and sends no reset. gRPC learns of it only from keepalive, whose pings
// come at most every 10 s (grpc-go's floor; Milvus refuses them more often than
// every 5 s): with the SDK's settings (10 s to answer a ping) a request on such a
// connection waited about 19 s before it failed over to a new one. So the Store
// checks the connection (check) before a request when the server has not answered
// for probeIdle, and while a request waits longer than watchAfter for its answer:
// it asks the server for its version, with no retry, within probeTimeout. When no
// answer comes, it closes the connection's sockets: gRPC connects anew at once, and
// the request (failed as Unavailable) is retried on the new connection. A server
// that refuses connections or answers with an error is left alone.
const (
	probeIdle        = time.Second
	watchAfter       = 2 * time.Second
	probeTimeout     = 1500 * time.Millisecond
	keepaliveTime    = 10 * time.Second // grpc-go's floor
	keepaliveTimeout = 3 * time.Second
)

// socket is a TCP connection gRPC dialled, known to the Store until it is closed.
type socket struct {
	net.Conn
	s    *Store
	once sync.Once
}

func (c *socket) Close() error {
	c.once.Do(func() {
		c.s.sockMu.Lock()
		delete(c.s.socks, c)
		c.s.sockMu.Unlock()
	})
	return c.Conn.Close()
}

// dialSocket is gRPC's dialer: a TCP connection, remembered.
func (s *Store) dialSocket(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	sc := &socket{Conn: c, s: s}
	s.sockMu.Lock()
	s.socks[sc] = struct{}{}
	s.sockMu.Unlock()
	return sc, nil
}

// watch is a gRPC interceptor: it notes when the server answers, and checks the
// connection while a request waits longer than watchAfter (see probeIdle).
func (s *Store) watch(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	done := make(chan struct{})
	if !strings.HasSuffix(method, "/GetVersion") { // not the check's own request
		go func() {
			t := time.NewTicker(watchAfter)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					s.check(ctx, watchAfter)
				}
			}
		}()
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	close(done)
	if err == nil {
		s.answered.Store(time.Now().UnixNano())
	}
	return err
}

// fresh checks the connection before a request when the server has not answered
// for probeIdle.
func (s *Store) fresh(ctx context.Context) {
	if time.Since(time.Unix(0, s.answered.Load())) >= probeIdle {
		s.check(ctx, probeIdle)
	}
}

// check asks the server for its version unless it answered within quiet; when no
// answer comes within probeTimeout, it closes the sockets of the connection (see
// probeIdle). One check runs at a time.
func (s *Store) check(ctx context.Context, quiet time.Duration) {
	s.checking.Lock()
	defer s.checking.Unlock()
	if time.Since(time.Unix(0, s.answered.Load())) < quiet || s.isClosed() { // it answered meanwhile
		return
	}
	s.mu.RLock()
	gc, ok := s.client.(*client.GrpcClient) // nil while New connects
	s.mu.RUnlock()
	if !ok || gc.Service == nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	_, err := gc.Service.GetVersion(pctx, &milvuspb.GetVersionRequest{}, grpc_retry.WithMax(1))
	cancel()
	if err == nil || ctx.Err() != nil || status.Code(err) != codes.DeadlineExceeded {
		return
	}
	s.sockMu.Lock()
	socks := slices.Collect(maps.Keys(s.socks))
	s.sockMu.Unlock()
	for _, c := range socks {
		_ = c.Close()
	}
}

// retryAttempts bounds the attempts of one request that fails with Unavailable
// (no connection to the server). The SDK makes six, waiting 0.18, 0.54, 1.6, 4.9
// and 15 s between them: each request to a Milvus that is down took 22 s to fail,
// and a task whose agent uses memory waited that long for every call of the memory
// tool. Four attempts, 0.18, 0.54 and 1.6 s apart, fail within about 2.5 s and
// still ride out a dropped connection (gRPC dials again at once) or most of a
// reconnection backoff (at most 3 s) when the server comes back.
const retryAttempts = 4

// dialOptions are the SDK's default gRPC options (reconnection backoff, no limit on
// the size of answers) with keepalive pings that find a dead connection within 13 s
// rather than 20 (see probeIdle), and fewer retries of a request that finds no
// connection.
func dialOptions() []grpc.DialOption {
	return append(slices.Clone(client.DefaultGrpcOpts),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc_retry.WithMax(retryAttempts)))
}

var levels = map[Consistency]entity.ConsistencyLevel{
	Strong:     entity.ClStrong,
	Session:    entity.ClSession,
	Bounded:    entity.ClBounded,
	Eventually: entity.ClEventually,
}

// Close closes the connection. It is idempotent; calls in flight fail, and later
// calls fail with vectorstore.ErrClosed. The data stays on the server.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("vectorstore/milvus: close: %w", err)
	}
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// begin runs the checks every call starts with: a done ctx, then a closed store.
func (s *Store) begin(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vectorstore/milvus: %s: %w", op, err)
	}
	if s.isClosed() {
		return vectorstore.ErrClosed
	}
	return nil
}

// fail wraps an error of the server or the connection. After Close it also wraps
// ErrClosed, and once ctx is done, ctx.Err() (gRPC reports a cancelled call with a
// status error of its own, which errors.Is does not match with context.Canceled).
func (s *Store) fail(ctx context.Context, op, coll string, err error) error {
	if s.isClosed() {
		return fmt.Errorf("vectorstore/milvus: %s %q: %w (%w)", op, coll, vectorstore.ErrClosed, err)
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("vectorstore/milvus: %s %q: %w (%w)", op, coll, cerr, err)
	}
	return fmt.Errorf("vectorstore/milvus: %s %q: %w", op, coll, err)
}

// rpc returns ctx bounded by the request timeout, once the connection is known to
// answer (fresh).
func (s *Store) rpc(ctx context.Context) (context.Context, context.CancelFunc) {
	s.fresh(ctx)
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}

// physicalName is the Milvus name of collection name: Prefix followed by name. When
// that is longer than Milvus allows, the name is cut and a hash of the whole name
// appended; the caller's name is kept in the collection's description, which lookup
// checks, so two names can never share a collection.
func (s *Store) physicalName(name string) string {
	full := s.cfg.Prefix + name
	if len(full) <= maxName {
		return full
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:12])
	return full[:maxName-len(h)-1] + "_" + h
}

// lookup returns the collection called name, or nil if it does not exist. It may
// still be loading: a search waits for it (awaitLoad).
func (s *Store) lookup(ctx context.Context, name string) (*collection, error) {
	s.cmu.Lock()
	c := s.colls[name]
	s.cmu.Unlock()
	if c != nil {
		return c, nil
	}
	return s.describe(ctx, name)
}

// describe asks the server about collection name and, if it exists, builds its
// index if it has none, asks the server to load it if it is not loaded (without
// waiting: see awaitLoad), and remembers it.
func (s *Store) describe(ctx context.Context, name string) (*collection, error) {
	phys := s.physicalName(name)
	rctx, cancel := s.rpc(ctx)
	defer cancel()
	ok, err := s.client.HasCollection(rctx, phys)
	if err != nil {
		return nil, s.fail(ctx, "describe", name, err)
	}
	if !ok {
		return nil, nil
	}
	info, err := s.client.DescribeCollection(rctx, phys)
	if err != nil {
		return nil, s.fail(ctx, "describe", name, err)
	}
	if info.Schema == nil || info.Schema.Description != name {
		return nil, fmt.Errorf("vectorstore/milvus: collection %q: %w: the Milvus collection %q was not created for it (its description should be the name)", name, vectorstore.ErrSchema, phys)
	}
	dim := 0
	for _, f := range info.Schema.Fields {
		if f.Name == fieldVector {
			dim, _ = strconv.Atoi(f.TypeParams[entity.TypeParamDim])
		}
	}
	if dim <= 0 {
		return nil, fmt.Errorf("vectorstore/milvus: collection %q: %w: the Milvus collection %q has no %q field with a dimension: not created by this package", name, vectorstore.ErrSchema, phys, fieldVector)
	}
	loaded, err := s.ready(rctx, phys)
	if err != nil {
		return nil, s.fail(ctx, "prepare", name, err)
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if c := s.colls[name]; c != nil { // described concurrently: keep one
		return c, nil
	}
	c := &collection{name: phys, dim: dim}
	c.loaded.Store(loaded)
	s.colls[name] = c
	return c, nil
}

// ready builds the index of a collection if it has none and asks the server to load
// it if it is not loaded, without waiting for the load: it reports whether the
// collection is loaded. A collection created by a Store that failed halfway, or
// released by an operator, recovers here.
//
// The load is not waited for here because a write does not need it, and a load can
// take minutes (a Milvus killed and started again loads every collection anew):
// waiting for it with every request (the SDK's synchronous load, up to the request
// timeout) held each write to memory 30 s and more while Milvus loaded.
func (s *Store) ready(ctx context.Context, phys string) (bool, error) {
	idx, err := s.client.DescribeIndex(ctx, phys, fieldVector)
	if err != nil || len(idx) == 0 {
		// DescribeIndex fails with "index not found" when there is none.
		flat, ferr := entity.NewIndexFlat(entity.COSINE)
		if ferr != nil {
			return false, ferr
		}
		if cerr := s.client.CreateIndex(ctx, phys, fieldVector, flat, false); cerr != nil {
			return false, fmt.Errorf("create index: %w", cerr)
		}
	}
	return s.load(ctx, phys)
}

// load reports whether collection phys is loaded, and asks the server to load it
// when it is neither loaded nor loading.
func (s *Store) load(ctx context.Context, phys string) (bool, error) {
	state, err := s.client.GetLoadState(ctx, phys, nil)
	if err != nil {
		return false, fmt.Errorf("load state: %w", err)
	}
	if state == entity.LoadStateNotExist {
		// Dropped under the Store (Milvus answers this state, with no error, for a
		// collection it does not hold): in the words gone reads, so that a search
		// forgets the collection and looks again, where it waited for a load that
		// could not come, then failed every search as loading.
		return false, fmt.Errorf("load state: collection not found[collection=%s]", phys)
	}
	if state == entity.LoadStateNotLoad {
		if err := s.client.LoadCollection(ctx, phys, true); err != nil {
			return false, fmt.Errorf("load: %w", err)
		}
	}
	return state == entity.LoadStateLoaded, nil
}

// How long a search waits for a collection to load: a collection the Store created
// (empty, it loads within seconds) up to the request timeout from its creation; one
// it found not loaded (a Milvus started again, a release), which may take minutes
// to load, up to loadWait in all from when the Store first found it so, and then
// not at all: a search fails at once, saying that the collection is loading, until
// it is loaded (a memory search then ranks without it, with a note). The server's
// state is asked every loadPoll.
const (
	loadWait = 10 * time.Second
	loadPoll = 200 * time.Millisecond
)

// errLoading is what a search of a collection still loading fails with. Its words
// ("not ready") mark it transient (refusal), unlike "not loaded" (released).
var errLoading = errors.New("not ready: Milvus is loading it (after a restart of the server or a release)")

// awaitLoad returns once collection c, called name, is loaded, or fails with
// errLoading once its wait (see loadWait) is over.
func (s *Store) awaitLoad(ctx context.Context, name string, c *collection) error {
	if c.loaded.Load() {
		return nil
	}
	limit := s.loadWait
	if c.created.Load() {
		limit = s.cfg.RequestTimeout
	}
	s.cmu.Lock()
	since, ok := s.loading[name]
	if !ok {
		since = time.Now()
		s.loading[name] = since
	}
	s.cmu.Unlock()
	t := time.NewTicker(loadPoll)
	defer t.Stop()
	for {
		rctx, cancel := s.rpc(ctx)
		loaded, err := s.load(rctx, c.name) // asks again for a load lost with a restart of the server
		cancel()
		if err != nil {
			return err
		}
		if loaded {
			c.loaded.Store(true)
			s.cmu.Lock()
			delete(s.loading, name)
			s.cmu.Unlock()
			return nil
		}
		if waited := time.Since(since); waited >= limit {
			return fmt.Errorf("collection %q is %w, for %s", name, errLoading, waited.Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// create returns collection name, creating it with dimension dim when it does not
// exist. Creation is serialized within the Store; a collection created meanwhile by
// another client is found by the describe that follows a failed create.
func (s *Store) create(ctx context.Context, name string, dim int) (*collection, error) {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if c, err := s.lookup(ctx, name); err != nil || c != nil {
		return c, err
	}
	phys := s.physicalName(name)
	schema := entity.NewSchema().WithName(phys).WithDescription(name).WithAutoID(false).
		WithField(entity.NewField().WithName(fieldID).WithDataType(entity.FieldTypeVarChar).
			WithIsPrimaryKey(true).WithMaxLength(maxVarChar)).
		WithField(entity.NewField().WithName(fieldVector).WithDataType(entity.FieldTypeFloatVector).
			WithDim(int64(dim))).
		WithField(entity.NewField().WithName(fieldText).WithDataType(entity.FieldTypeVarChar).
			WithMaxLength(maxVarChar)).
		WithField(entity.NewField().WithName(fieldMetadata).WithDataType(entity.FieldTypeJSON))
	rctx, cancel := s.rpc(ctx)
	cerr := s.client.CreateCollection(rctx, schema, 1, client.WithConsistencyLevel(s.level))
	cancel()
	// Whether it failed or not (another client may have created it first), the
	// collection should now exist: describe builds its index and asks for its load.
	c, err := s.describe(ctx, name)
	if err != nil {
		return nil, err
	}
	if c == nil {
		if cerr == nil {
			cerr = errors.New("collection missing after it was created")
		}
		return nil, s.fail(ctx, "create", name, cerr)
	}
	if cerr == nil {
		// Not when the create failed: the collection was there (another client's, or
		// one a Milvus starting again did not list yet), and may load for minutes.
		c.created.Store(true)
		s.cmu.Lock()
		s.loading[name] = time.Now() // its load starts now, not when a collection of its name was found not loaded
		s.cmu.Unlock()
	}
	return c, nil
}

// gone reports whether err, from a request on collection c (called name), says
// that c no longer exists on the server: dropped, or lost with the server's data
// (a Milvus started afresh). Then the Store forgets c, so that the next lookup asks
// the server again, and the caller tries once more: an Upsert creates the
// collection anew, a Search finds nothing, a Delete has nothing to delete.
func (s *Store) gone(name string, c *collection, err error) bool {
	var missing client.ErrCollectionNotExists
	msg := err.Error()
	// Milvus 2.3 and later say "collection not found[collection=…]"; 2.2 said
	// "can't find collection"; the SDK's own check returns ErrCollectionNotExists.
	if !errors.As(err, &missing) && !strings.Contains(msg, "collection not found") && !strings.Contains(msg, "can't find collection") {
		return false
	}
	s.forget(name, c)
	return true
}

// forget drops c, known as collection name, from what the Store knows, unless
// another lookup replaced it already: the next lookup asks the server again.
func (s *Store) forget(name string, c *collection) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.colls[name] == c {
		delete(s.colls, name)
		delete(s.loading, name) // the collection found next waits for its load afresh
	}
}

// released reports whether err, from a search (or a Session delete's query) of collection c (called name), says
// that the server no longer holds c loaded: an operator released it, or a Milvus
// killed and started again came back without it loaded. Then the Store forgets c,
// so that the next lookup makes it ready again (describe loads it): a Store that
// kept c as loaded failed every search of it until its process restarted.
func (s *Store) released(name string, c *collection, err error) bool {
	if !strings.Contains(err.Error(), "not loaded") {
		return false
	}
	s.forget(name, c)
	return true
}

// remade reports whether collection name, known as c, is no longer that collection
// on the server: dropped, or made again with another dimension by another client
// (an operator's move to another embedding model, whose nodes make the collections
// anew). The Store forgets c and asks the server again, once, after a request on c
// found a dimension other than c's or the server refused it: a Store that kept c's
// dimension for good refused the batches and queries of the collection's new
// dimension, and sent those of the old, which the server refused as items
// (ErrRefused) or failed to search.
func (s *Store) remade(ctx context.Context, name string, c *collection) bool {
	s.forget(name, c)
	fresh, err := s.describe(ctx, name)
	return err == nil && (fresh == nil || fresh.dim != c.dim)
}

// transientReasons are words of the server's errors that speak of its state (a
// limit of its rate or memory, a collection not yet loaded), not of the request:
// the same request may pass later.
var transientReasons = []string{"rate limit", "quota", "deny to write", "memory", "not loaded", "not ready",
	"unavailable", "timeout", "timed out", "too many", "busy", "retry"}

// refusal reports whether err, from a write, is the server refusing what was sent:
// an error the server answered with (a gRPC status error means the connection or
// the server failed, not the request), or the SDK's own check of the columns, that
// does not speak of a passing state of the server.
func refusal(err error) bool {
	if _, ok := status.FromError(err); ok || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	msg := strings.ToLower(err.Error())
	for _, r := range transientReasons {
		if strings.Contains(msg, r) {
			return false
		}
	}
	return true
}

// row is one validated item, ready to send.
type row struct {
	id     string
	vector []float32
	text   string
	meta   []byte
}

// prepare validates a batch as Store.Upsert requires and Milvus allows, keeps the
// last item of each ID, and returns the rows and the batch's dimension.
func prepare(items []vectorstore.Item) ([]row, int, error) {
	if len(items) == 0 {
		return nil, 0, nil
	}
	dim := len(items[0].Vector)
	rows := make([]row, 0, len(items))
	at := make(map[string]int, len(items))
	for i, it := range items {
		if it.ID == "" {
			return nil, 0, fmt.Errorf("%w: item %d has an empty ID", vectorstore.ErrInvalid, i)
		}
		if err := checkString(fmt.Sprintf("the ID of item %d", i), it.ID, maxVarChar); err != nil {
			return nil, 0, err
		}
		if err := vectorstore.CheckVector(it.Vector); err != nil {
			return nil, 0, fmt.Errorf("item %d (%q): %w", i, it.ID, err)
		}
		if len(it.Vector) != dim {
			return nil, 0, fmt.Errorf("%w: item %d (%q) has dimension %d, item 0 has %d", vectorstore.ErrDimension, i, it.ID, len(it.Vector), dim)
		}
		if err := checkString(fmt.Sprintf("the text of item %d (%q)", i, it.ID), it.Text, maxVarChar); err != nil {
			return nil, 0, err
		}
		for k, v := range it.Metadata {
			if err := checkString(fmt.Sprintf("a metadata key of item %d (%q)", i, it.ID), k, 0); err != nil {
				return nil, 0, err
			}
			if err := checkString(fmt.Sprintf("the metadata value of %q in item %d (%q)", k, i, it.ID), v, 0); err != nil {
				return nil, 0, err
			}
		}
		meta, err := encodeMetadata(it.Metadata)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: item %d (%q): metadata: %w", vectorstore.ErrInvalid, i, it.ID, err)
		}
		if len(meta) > maxJSON {
			return nil, 0, fmt.Errorf("%w: item %d (%q): metadata encodes to %d bytes of JSON, Milvus takes at most %d", vectorstore.ErrInvalid, i, it.ID, len(meta), maxJSON)
		}
		r := row{id: it.ID, vector: slices.Clone(it.Vector), text: it.Text, meta: meta}
		if j, dup := at[it.ID]; dup {
			rows[j] = r // the later item wins
			continue
		}
		at[it.ID] = len(rows)
		rows = append(rows, r)
	}
	if dim > maxDim {
		return nil, 0, fmt.Errorf("%w: dimension %d, Milvus takes at most %d", vectorstore.ErrInvalid, dim, maxDim)
	}
	return rows, dim, nil
}

// Upsert implements vectorstore.Store. The batch is validated in full, then sent as
// one Milvus upsert request (see doc.go on atomicity).
func (s *Store) Upsert(ctx context.Context, collection string, items []vectorstore.Item) error {
	if err := s.begin(ctx, "upsert"); err != nil {
		return err
	}
	if err := vectorstore.CheckCollectionName(collection); err != nil {
		return err
	}
	rows, dim, err := prepare(items)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	ids := make([]string, len(rows))
	vecs := make([][]float32, len(rows))
	texts := make([]string, len(rows))
	metas := make([][]byte, len(rows))
	for i, r := range rows {
		ids[i], vecs[i], texts[i], metas[i] = r.id, r.vector, r.text, r.meta
	}
	for attempt := 0; ; attempt++ {
		c, err := s.lookup(ctx, collection)
		if err != nil {
			return err
		}
		if c == nil {
			if c, err = s.create(ctx, collection, dim); err != nil {
				return err
			}
		}
		if c.dim != dim {
			if attempt == 0 && s.remade(ctx, collection, c) {
				continue // made again with another dimension: look again
			}
			return fmt.Errorf("%w: collection %q has dimension %d, the batch has %d", vectorstore.ErrDimension, collection, c.dim, dim)
		}
		if err := ctx.Err(); err != nil { // it may have ended while the collection was made
			return fmt.Errorf("vectorstore/milvus: upsert: %w", err)
		}
		rctx, cancel := s.rpc(ctx)
		_, err = s.client.Upsert(rctx, c.name, "",
			entity.NewColumnVarChar(fieldID, ids),
			entity.NewColumnFloatVector(fieldVector, dim, vecs),
			entity.NewColumnVarChar(fieldText, texts),
			entity.NewColumnJSONBytes(fieldMetadata, metas))
		cancel()
		if err != nil && attempt == 0 && (s.gone(collection, c, err) || refusal(err) && ctx.Err() == nil && s.remade(ctx, collection, c)) {
			continue // dropped under the Store, or made again: create it again, or write to it as it is now
		}
		if err != nil && refusal(err) && ctx.Err() == nil && !s.isClosed() {
			return fmt.Errorf("vectorstore/milvus: upsert %q: %w: %w", collection, vectorstore.ErrRefused, err)
		}
		if err != nil {
			return s.fail(ctx, "upsert", collection, err)
		}
		c.written.Store(true)
		return nil
	}
}

// Delete implements vectorstore.Store. The IDs go in one Milvus delete request.
func (s *Store) Delete(ctx context.Context, collection string, ids []string) error {
	if err := s.begin(ctx, "delete"); err != nil {
		return err
	}
	if err := vectorstore.CheckCollectionName(collection); err != nil {
		return err
	}
	var uniq []string
	seen := make(map[string]bool, len(ids))
	for i, id := range ids {
		if id == "" {
			return fmt.Errorf("%w: ID %d is empty", vectorstore.ErrInvalid, i)
		}
		if err := checkString(fmt.Sprintf("ID %d", i), id, 0); err != nil {
			return err
		}
		if !seen[id] && len(id) <= maxVarChar { // a longer ID cannot be stored
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	if len(uniq) == 0 {
		return nil
	}
	for attempt := 0; ; attempt++ {
		c, err := s.lookup(ctx, collection)
		if err != nil || c == nil {
			return err
		}
		err = s.deleteIn(ctx, c, uniq)
		if err != nil && attempt == 0 && (s.gone(collection, c, err) || s.released(collection, c, err)) {
			continue // dropped under the Store, or released (a Session delete's query needs it loaded): look again
		}
		if err != nil {
			return s.fail(ctx, "delete", collection, err)
		}
		return nil
	}
}

// deleteIn deletes ids from c and, at Session consistency, waits until the
// delete is visible to searches.
func (s *Store) deleteIn(ctx context.Context, c *collection, ids []string) error {
	rctx, cancel := s.rpc(ctx)
	defer cancel()
	if err := s.client.Delete(rctx, c.name, "", idsExpr(ids)); err != nil {
		return err
	}
	c.written.Store(true)
	if s.level != entity.ClSession {
		return nil
	}
	if !c.loaded.Load() {
		// A collection not loaded has no search to wait for: its load reads the
		// delete. It may have loaded since the Store last asked.
		loaded, err := s.load(rctx, c.name)
		if err != nil || !loaded {
			return err
		}
		c.loaded.Store(true)
	}
	// Milvus 2.3 returns no timestamp for a delete, so the SDK's session cannot
	// wait for it. A Strong query waits until the query nodes have consumed
	// everything up to now, the delete included: the searches after it see it.
	if _, err := s.client.Query(rctx, c.name, nil, fieldID+` == ""`, []string{fieldID},
		client.WithSearchQueryConsistencyLevel(entity.ClStrong), client.WithLimit(1)); err != nil {
		return fmt.Errorf("waiting until the delete is visible: %w", err)
	}
	return nil
}

// Search implements vectorstore.Store. Milvus ranks with the FLAT index (exact
// cosine) among the items that match the filter; the Store then scores the hits again
// in float64 from their stored vectors and orders them by score, then ID.
func (s *Store) Search(ctx context.Context, collection string, q vectorstore.Query) ([]vectorstore.Hit, error) {
	if err := s.begin(ctx, "search"); err != nil {
		return nil, err
	}
	if err := vectorstore.CheckCollectionName(collection); err != nil {
		return nil, err
	}
	if q.K <= 0 {
		return nil, fmt.Errorf("%w: K is %d, must be positive", vectorstore.ErrInvalid, q.K)
	}
	if q.K > maxTopK {
		return nil, fmt.Errorf("%w: K is %d, Milvus returns at most %d hits", vectorstore.ErrInvalid, q.K, maxTopK)
	}
	if err := vectorstore.CheckVector(q.Vector); err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	for attempt := 0; ; attempt++ {
		c, err := s.lookup(ctx, collection)
		if err != nil || c == nil {
			return nil, err
		}
		hits, err := s.search(ctx, collection, c, q)
		if err != nil && attempt == 0 && (s.gone(collection, c, err) || s.released(collection, c, err) ||
			(errors.Is(err, vectorstore.ErrDimension) || refusal(err)) && ctx.Err() == nil && s.remade(ctx, collection, c)) {
			continue // dropped, released or made again with another dimension under the Store: look again
		}
		return hits, err
	}
}

// search searches collection, known as c. Errors of the server come unwrapped:
// Search wraps them.
func (s *Store) search(ctx context.Context, collection string, c *collection, q vectorstore.Query) ([]vectorstore.Hit, error) {
	if len(q.Vector) != c.dim {
		return nil, fmt.Errorf("%w: collection %q has dimension %d, the query has %d", vectorstore.ErrDimension, collection, c.dim, len(q.Vector))
	}
	if err := s.awaitLoad(ctx, collection, c); err != nil {
		return nil, s.fail(ctx, "search", collection, err)
	}
	for k, v := range q.Filter {
		if checkString("a filter key", k, 0) != nil || checkString("a filter value", v, 0) != nil {
			return nil, nil // no stored key or value is invalid UTF-8: nothing matches
		}
	}
	sp, err := entity.NewIndexFlatSearchParam()
	if err != nil {
		return nil, err
	}
	level := s.level
	if level == entity.ClSession && !c.written.Load() {
		level = entity.ClStrong
	}
	expr := filterExpr(q.Filter)
	limit := min(max(2*q.K, q.K+16), maxTopK)
	for {
		rctx, cancel := s.rpc(ctx)
		res, err := s.client.Search(rctx, c.name, nil, expr,
			[]string{fieldID, fieldVector, fieldText, fieldMetadata},
			[]entity.Vector{entity.FloatVector(q.Vector)}, fieldVector, entity.COSINE, limit, sp,
			client.WithSearchQueryConsistencyLevel(level))
		cancel()
		if err != nil {
			return nil, s.fail(ctx, "search", collection, err)
		}
		if len(res) != 1 {
			return nil, s.fail(ctx, "search", collection, fmt.Errorf("%d result sets for one query", len(res)))
		}
		r := res[0]
		if r.ResultCount == 0 {
			// Nothing matched. The SDK then reports the output fields missing from
			// the (empty) result as an error in r.Err.
			return nil, nil
		}
		if r.Err != nil {
			return nil, s.fail(ctx, "search", collection, r.Err)
		}
		n := r.ResultCount
		// Items tied with the K-th may lie past the last one fetched: fetch more.
		if n == limit && limit < maxTopK && n > q.K && r.Scores[n-1] >= r.Scores[q.K-1]-tieEpsilon {
			limit = min(4*limit, maxTopK)
			continue
		}
		hits, err := decodeHits(r, q.Vector)
		if err != nil {
			return nil, s.fail(ctx, "search", collection, err)
		}
		slices.SortFunc(hits, func(a, b vectorstore.Hit) int {
			if a.Score != b.Score {
				return cmp.Compare(b.Score, a.Score)
			}
			return cmp.Compare(a.ID, b.ID)
		})
		return hits[:min(q.K, len(hits))], nil
	}
}

// decodeHits turns a search result into hits scored by the exact cosine (computed in
// float64, rounded to float32 once) between query and each stored vector.
func decodeHits(r client.SearchResult, query []float32) ([]vectorstore.Hit, error) {
	ids, ok1 := r.Fields.GetColumn(fieldID).(*entity.ColumnVarChar)
	vecs, ok2 := r.Fields.GetColumn(fieldVector).(*entity.ColumnFloatVector)
	texts, ok3 := r.Fields.GetColumn(fieldText).(*entity.ColumnVarChar)
	metas, ok4 := r.Fields.GetColumn(fieldMetadata).(*entity.ColumnJSONBytes)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, fmt.Errorf("result lacks an output field: id %v, vector %v, text %v, metadata %v", ok1, ok2, ok3, ok4)
	}
	n := r.ResultCount
	if len(ids.Data()) != n || len(vecs.Data()) != n || len(texts.Data()) != n || len(metas.Data()) != n {
		return nil, fmt.Errorf("result columns of unequal length for %d hits", n)
	}
	hits := make([]vectorstore.Hit, n)
	for i := range n {
		meta, err := decodeMetadata(metas.Data()[i])
		if err != nil {
			return nil, fmt.Errorf("item %q: %w", ids.Data()[i], err)
		}
		vec := slices.Clone(vecs.Data()[i])
		hits[i] = vectorstore.Hit{
			Item:  vectorstore.Item{ID: ids.Data()[i], Vector: vec, Metadata: meta, Text: texts.Data()[i]},
			Score: cosine(query, vec),
		}
	}
	return hits, nil
}

// cosine is the cosine similarity of a and b, computed in float64 and kept in [-1, 1].
func cosine(a, b []float32) float32 {
	var ab, aa, bb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		ab += x * y
		aa += x * x
		bb += y * y
	}
	return float32(max(-1, min(1, ab/math.Sqrt(aa*bb))))
}
