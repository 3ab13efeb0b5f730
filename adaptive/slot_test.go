package adaptive_test

import (
	"context"
	"errors"
	"testing"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSlot(t *testing.T) {
	alg, err := adaptive.NewConstant(2)
	require.NoError(t, err)
	lim, err := adaptive.NewGate(alg)
	require.NoError(t, err)
	ctx := context.Background()

	r1, ok, err := lim.Slot(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	r2, ok, err := lim.Slot(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, 2, lim.InFlight())

	_, ok, err = lim.Slot(ctx)
	assert.NoError(t, err, "a shed request is not an error")
	assert.False(t, ok)

	r1(true)
	r2(false)
	assert.Equal(t, 0, lim.InFlight())
	s := lim.Stats()
	assert.Equal(t, uint64(1), s.Succeeded)
	assert.Equal(t, uint64(1), s.Dropped)
	assert.Equal(t, uint64(1), s.Rejected)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, ok, err = lim.Slot(cancelled)
	assert.NoError(t, err)
	assert.False(t, ok)

	boom := errors.New("boom")
	_, ok, err = adaptive.SlotFunc(func(context.Context) (*adaptive.Token, error) { return nil, boom })(ctx)
	assert.ErrorIs(t, err, boom)
	assert.False(t, ok)
}
