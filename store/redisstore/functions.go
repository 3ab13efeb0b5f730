package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/monotime"
	"github.com/redis/rueidis"
)

// Redis functions. Every program of the store (a decision, a group, a
// batch, a grant, a heartbeat) is a script in two forms: a function library
// (FUNCTION LOAD, Redis 7 and later), called with FCALL, and the same text
// as an EVAL script, called with EVALSHA. A library's top level (the Lua
// twins, the helpers of luaCommon) runs once, when it is loaded; an EVAL
// script runs it, and creates every one of its closures, on every call.
// Under FCALL only the body runs.
//
// A library is named after its text ("floodgate_" and 20 hex digits of its
// SHA-1) and holds one function of the same name, so two versions of the
// store never call each other's code and loading is idempotent. The store
// loads a library when FCALL answers that the function is not there (the
// first call on a server, after FUNCTION FLUSH, a restart without
// persistence, a node that joined a Cluster): on every node the client
// knows (a Cluster's masters each need their own copy; a replica gets its
// master's and refuses a load with READONLY; the nodes are loaded in
// parallel), then calls again. A store falls back to EVALSHA when the
// server has no functions (Redis 6: an unknown command) or the user may not
// call or load them (ACL: NOPERM), and tries FCALL again a minute later
// (an ACL grant, a rolling upgrade to Redis 7); a library whose code the
// server refuses (it does not compile or register there) runs as EVALSHA
// for the rest of the process; a load refused for any other reason (out of
// memory, a busy or loading server) runs that one call as EVALSHA.
//
// Neither FCALL nor FUNCTION LOAD is retried after a connection error: FCALL
// is not marked retryable (like EVALSHA with rueidis.NewLuaScript), and a
// call goes again only after a Redis error that says it did not run (the
// function was not found, the command is unknown or not permitted).

// smallint maps the decimal strings of small non-negative integers (the
// indices and most costs in ARGV) to their numbers: a table lookup costs
// the server a fraction of tonumber. A library builds it once (a table
// constructor: its top level may call no function, not even tostring); a
// script, which would build it on every call, has it empty, and the bodies
// fall back to tonumber (smallint[x] or tonumber(x)). library tells the
// prelude which form it runs in.
var luaSmallIntsLib = func() string {
	var b strings.Builder
	b.WriteString("local smallint = {")
	for i := range 256 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "['%d'] = %d", i, i)
	}
	b.WriteString("}\nlocal library = true\n")
	return b.String()
}()

const luaSmallIntsEval = "local smallint = {}\nlocal library = false\n"

// script is one program of the store in its two forms.
type script struct {
	name   string       // the library and its function: floodgate_<20 hex digits>
	lib    string       // the library's code, for FUNCTION LOAD
	lua    *rueidis.Lua // the same program for EVALSHA
	noFunc atomic.Bool  // a server refused lib's code: EVALSHA only
}

// newScript makes the script whose top level is prelude (definitions: the
// twins, luaCommon) and whose body is body (the code that reads KEYS and
// ARGV and returns the reply). The EVAL form is prelude then body, as it
// always was; the library runs prelude once and registers body as its
// function.
func newScript(prelude, body string) *script {
	text := luaSmallIntsEval + prelude + body
	// The name is a hash of the whole library but its name: every change
	// of its code, the wrapper included, names a new library.
	code := luaSmallIntsLib + prelude + "\nlocal function run(KEYS, ARGV)\n" + body + "\nend\nredis.register_function('"
	const tail = "', run)\n"
	sum := sha1.Sum([]byte(code + tail))
	name := "floodgate_" + hex.EncodeToString(sum[:10])
	var b strings.Builder
	b.WriteString("#!lua name=")
	b.WriteString(name)
	b.WriteString("\n")
	b.WriteString(code)
	b.WriteString(name)
	b.WriteString(tail)
	// NewLuaScript (not NewLuaScriptRetryable): the EVALSHA/EVAL of a
	// consuming script is never retried by rueidis after a connection error,
	// because a command that was written may have run.
	return &script{name: name, lib: b.String(), lua: rueidis.NewLuaScript(text)}
}

// call runs sc on keys and args (see the comment on Redis functions above).
func (s *Store) call(ctx context.Context, sc *script, keys, args []string) rueidis.RedisResult {
	if s.onScripts() || sc.noFunc.Load() {
		return sc.lua.Exec(ctx, s.client, keys, args)
	}
	r := s.fcall(ctx, sc, keys, args)
	rerr, ok := rueidis.IsRedisErr(r.Error())
	if !ok {
		return r
	}
	msg := rerr.Error()
	switch {
	case notFound(msg):
		if err := s.load(ctx, sc); err != nil {
			if rerr, ok := rueidis.IsRedisErr(err); !ok {
				return rueidis.NewErrorResult(err) // not a refusal: the load did not get through
			} else if unsupported(rerr.Error()) {
				s.fallBack()
			} else if refusedCode(rerr.Error()) {
				sc.noFunc.Store(true)
			} // else refused for now (OOM, BUSY, LOADING...): this call only
			return sc.lua.Exec(ctx, s.client, keys, args)
		}
		r = s.fcall(ctx, sc, keys, args)
		if rerr, ok := rueidis.IsRedisErr(r.Error()); ok && notFound(rerr.Error()) {
			// Loaded, yet not where the call went (a node the client did not
			// know yet): this call as a script.
			return sc.lua.Exec(ctx, s.client, keys, args)
		}
		return r
	case unsupported(msg) && !fromInside(msg):
		s.fallBack()
		return sc.lua.Exec(ctx, s.client, keys, args)
	}
	return r
}

// retryFunctions is how long a store runs its programs as scripts after a
// server said it has no functions or the user may not use them.
const retryFunctions = time.Minute

// onScripts reports whether s runs its programs as EVAL scripts: always
// (withEvalOnly), or since a fallback, until its retry time.
func (s *Store) onScripts() bool {
	return s.evalOnly.Load() || monotime.Nanotime() < s.evalUntil.Load()
}

// fallBack runs s's programs as scripts for retryFunctions.
func (s *Store) fallBack() { s.evalUntil.Store(monotime.Nanotime() + int64(retryFunctions)) }

func (s *Store) fcall(ctx context.Context, sc *script, keys, args []string) rueidis.RedisResult {
	c := s.client
	return c.Do(ctx, c.B().Fcall().Function(sc.name).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
}

// load loads sc's library on every node of the client. It succeeds when one
// node at least has it; else it returns the first refusal (a *RedisError)
// or the error that kept it from a node.
func (s *Store) load(ctx context.Context, sc *script) error {
	nodes := s.client.Nodes()
	res := make([]error, 0, len(nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			err := n.Do(ctx, n.B().FunctionLoad().FunctionCode(sc.lib).Build()).Error()
			mu.Lock()
			res = append(res, err)
			mu.Unlock()
		})
	}
	wg.Wait()
	var errs []error
	loaded := false
	for _, err := range res {
		rerr, isRedis := rueidis.IsRedisErr(err)
		switch {
		case err == nil, isRedis && strings.Contains(rerr.Error(), "already exists"):
			loaded = true
		case isRedis && strings.HasPrefix(rerr.Error(), "READONLY"):
			// A replica: it has its master's libraries.
		default:
			errs = append(errs, err)
		}
	}
	if loaded {
		return nil
	}
	for _, err := range errs {
		if _, ok := rueidis.IsRedisErr(err); ok {
			return err
		}
	}
	if len(errs) == 0 {
		return errNoNode
	}
	return errors.Join(errs...)
}

var errNoNode = errors.New("redisstore: no node to load a function library on")

// notFound reports whether a Redis error says FCALL found no such function
// (rueidis drops the "ERR " of an error reply; either way is read).
func notFound(msg string) bool {
	return strings.HasPrefix(strings.TrimPrefix(msg, "ERR "), "Function not found")
}

// unsupported reports whether a Redis error says the server has no
// functions (Redis before 7) or the user may not use them (ACL).
func unsupported(msg string) bool {
	msg = strings.TrimPrefix(msg, "ERR ")
	return strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown subcommand") || strings.HasPrefix(msg, "NOPERM")
}

// fromInside reports whether an error of FCALL was raised inside the
// function (by a command it called: the function ran, and may have
// written), which Redis marks with the script's location.
func fromInside(msg string) bool {
	return strings.Contains(msg, " script: ") || strings.Contains(msg, "@user_function")
}

// refusedCode reports whether FUNCTION LOAD refused the library's code
// itself (it does not compile or register on that server), which no retry
// changes.
func refusedCode(msg string) bool {
	msg = strings.TrimPrefix(msg, "ERR ")
	for _, p := range []string{"Error registering functions", "Error compiling function", "Missing library metadata", "Invalid metadata", "Invalid library metadata", "Library names can only contain", "Function names can only contain"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
