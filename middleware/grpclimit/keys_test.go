package grpclimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bucket"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/redisstore"
)

// redisClient connects to the Redis of the test setup (see redistest.Addr).
func redisClient(t *testing.T) rueidis.Client { return redistest.Client(t) }

// redisKeys lists every key of the Redis server with SCAN.
func redisKeys(t *testing.T, c rueidis.Client) []string {
	t.Helper()
	var keys []string
	var cursor uint64
	for {
		e, err := c.Do(context.Background(), c.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
		require.NoError(t, err)
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			return keys
		}
	}
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// TestHeaderKeyNeverReachesRedis serves calls keyed by a service token on a
// Redis store, then scans every key of the server: the token (nor any long
// piece of it) is in none, while the limit's keys are there.
func TestHeaderKeyNeverReachesRedis(t *testing.T) {
	client := redisClient(t)
	prefix := "grpclimit-test-" + randomHex(t, 4) + ":"
	token := "sk_live_" + randomHex(t, 16)
	store, err := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithTimeout(5*time.Second))
	require.NoError(t, err)
	lim, err := bucket.NewKeyed(store, bucket.Config{Name: "per-token", Rate: floodgate.PerMinute(1), Burst: 2})
	require.NoError(t, err)
	obs := &events{}
	_, err = New(lim, WithHeaderKey("x-api-key"), WithObserver(obs))
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig, "a shared store without the fleet's secret")
	require.ErrorContains(t, err, "WithKeySecret")
	ic, err := New(lim, WithHeaderKey("x-api-key"), WithKeySecret([]byte("the fleet's secret, 32 bytes long")), WithObserver(obs))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary()), grpc.StreamInterceptor(ic.Stream())})
	hc := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-api-key", token)

	for range 2 {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
	}
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "one budget for the token, in Redis")
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = w.Recv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "streams share it")

	ours := 0
	for _, k := range redisKeys(t, client) {
		if strings.HasPrefix(k, prefix) {
			ours++
		}
		assert.NotContains(t, k, token[8:24], "Redis key %q holds the credential", k)
	}
	assert.Equal(t, 1, ours, "the token's one key is in Redis")
	for _, ev := range obs.all() {
		if ev.Err != nil {
			assert.NotContains(t, ev.Err.Error(), token[8:24])
		}
	}
}

// TestKeySecretSharedByNodes: two servers ("nodes") on one Redis share a
// token's budget when they share the secret; with secrets of their own
// (the default: one per process) each node keeps its own budget.
func TestKeySecretSharedByNodes(t *testing.T) {
	client := redisClient(t)
	store, err := redisstore.New(client, redisstore.WithPrefix("grpclimit-test-"+randomHex(t, 4)+":"), redisstore.WithTimeout(5*time.Second))
	require.NoError(t, err)
	lim, err := bucket.NewKeyed(store, bucket.Config{Name: "per-token", Rate: floodgate.PerMinute(1), Burst: 2})
	require.NoError(t, err)
	node := func(secret string) healthpb.HealthClient {
		ic, err := New(lim, WithHeaderKey("x-token"), WithKeySecret([]byte(secret)))
		require.NoError(t, err)
		conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
		return healthpb.NewHealthClient(conn)
	}
	call := func(hc healthpb.HealthClient, token string) codes.Code {
		ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-token", token)
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return status.Code(err)
	}
	a, b := node("fleet-secret-0123456789"), node("fleet-secret-0123456789")
	assert.Equal(t, codes.OK, call(a, "t1"))
	assert.Equal(t, codes.OK, call(b, "t1"))
	assert.Equal(t, codes.ResourceExhausted, call(a, "t1"), "one fleet, one budget")
	assert.Equal(t, codes.ResourceExhausted, call(b, "t1"))

	lone := node("another-secret-9876543210")
	assert.Equal(t, codes.OK, call(lone, "t1"), "another secret, another budget")
}

// BenchmarkHeaderKey measures the key derivation of a header value: one
// pooled HMAC-SHA256 and the key string.
func BenchmarkHeaderKey(b *testing.B) {
	h := newKeyHasher([]byte("bench-secret-0123456789abcdef"))
	for _, size := range []int{40, 1024} {
		v := strings.Repeat("k", size)
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = h.Key(v)
			}
		})
	}
	// The unpooled way, for comparison: a new HMAC state per key.
	b.Run("fresh-hmac-40B", func(b *testing.B) {
		b.ReportAllocs()
		v := strings.Repeat("k", 40)
		for b.Loop() {
			_ = oracleKey([]byte("bench-secret-0123456789abcdef"), v)
		}
	})
}
