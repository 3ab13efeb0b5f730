package grpclimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policy"
	"github.com/floodgate-go/floodgate/store/memstore"
)

const grpcPolicies = `default_plan: free
policies:
  - {name: free, rate: 2/m}
  - {name: pro, rate: 4/m}
  - {name: per-peer, rate: 10/m}
  - {name: shadow, rate: 1/m, dry_run: true}
overrides:
  tok-pro: pro
rules:
  - key: api_key
    plan: true
  - key: remote_address
    policy: per-peer
  - key: method
    value: /grpc.health.v1.Health/Check
    rules:
      - key: remote_address
        policy: shadow
`

// A policy set behind the gRPC interceptors: plans per API key and a
// per-peer limit, all or nothing, and a dry-run policy that only reports.
// grpcLive is grpcPolicies on a memory store whose clock stands still.
func grpcLive(t *testing.T) *policy.Live {
	t.Helper()
	cfg, err := policy.Parse("grpc.yaml", []byte(grpcPolicies))
	require.NoError(t, err)
	s, err := memstore.New(memstore.WithClock(floodgate.ClockFunc(func() time.Time { return time.Unix(1_800_000_000, 0) })))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	live, err := policy.NewLive(cfg, s)
	require.NoError(t, err)
	return live
}

func TestPoliciesInterceptors(t *testing.T) {
	live := grpcLive(t)
	obs := &events{}
	ic, err := Policies(live,
		WithDescriptor(HeaderEntry("x-api-key", "api_key")),
		WithDescriptor(PeerEntry("remote_address")),
		WithDescriptor(MethodEntry("method"), PeerEntry("remote_address")),
		WithObserver(obs))
	require.NoError(t, err)
	conn, _ := serve(t, []grpc.ServerOption{grpc.UnaryInterceptor(ic.Unary())})
	hc := healthpb.NewHealthClient(conn)
	call := func(key string) error {
		ctx := testCtx(t)
		if key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
		}
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	var refusedBy []string // the QuotaFailure subjects of the last refusal
	admitted := func(key string, n int) int {
		ok := 0
		refusedBy = nil
		for range n {
			if err := call(key); err == nil {
				ok++
			} else {
				require.Equal(t, codes.ResourceExhausted, status.Code(err))
				refusedBy = quotaSubjects(err)
			}
		}
		return ok
	}
	assert.Equal(t, 2, admitted("tok-free", 3), "the free plan")
	assert.Equal(t, []string{"policy:free"}, refusedBy, "the refusal names the plan that refused")
	assert.Equal(t, 4, admitted("tok-pro", 5), "the pro override")
	assert.Equal(t, []string{"policy:pro"}, refusedBy)
	// The peer has spent 6 of its 10 (refusals charged nothing): 4 more.
	assert.Equal(t, 4, admitted("", 6), "per-peer, with nothing charged by the refusals above")
	assert.Equal(t, []string{"policy:per-peer"}, refusedBy, "the per-peer limit refused, not the dry-run policy")
	assert.NotZero(t, obs.count(floodgate.OutcomeWouldDeny), "the dry-run policy reports")

	_, err = Policies(live)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	var nilLive *policy.Live
	_, err = Policies(nilLive, WithDescriptor(MethodEntry("m")))
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = Policies(live, WithDescriptor(MethodEntry("m")), nil)
	assert.True(t, errors.Is(err, floodgate.ErrInvalidConfig))
	_ = context.Background
}
