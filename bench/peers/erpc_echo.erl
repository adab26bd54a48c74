%% Erlang distribution as a peer of rpclb: echo(1, <<"abc">>) through erpc:call/4 from
%% this node to a second node over 127.0.0.1.
%%
%% main/1 runs on the client node (scripts/bench-peers.sh starts it with `erl -name ...
%% -run erpc_echo main Count Warmup Seconds Inflight`). It starts the server node itself
%% with peer:start_link/1 (a child of this VM with the same cookie, code path and CPU
%% affinity; it halts when this node goes away), then measures:
%%   latency     Count sequential erpc:call/4 after Warmup untimed ones, each timed with
%%               erlang:monotonic_time/1: median and p99 (nearest rank);
%%   throughput  Inflight client processes, each calling in a loop, so that Inflight calls
%%               are outstanding on the one distribution connection; completions counted
%%               over Seconds after 0.5 s of warm-up.
%% Output (parsed by the script):
%%   erpc_call median_us=X p99_us=Y
%%   erpc_procs payload=N inflight=64 calls_per_s=X   (N: external term format size of the arguments)
-module(erpc_echo).
-export([main/1, echo/2]).

%% The served function: returns its two arguments as a list.
echo(N, S) -> [N, S].

main([Count, Warmup, Seconds, Inflight]) ->
    Code = try
               run(list_to_integer(Count), list_to_integer(Warmup), list_to_float_or_int(Seconds),
                   list_to_integer(Inflight)),
               0
           catch Class:Reason:Stack ->
               io:format(standard_error, "erpc_echo: ~p:~p~n~p~n", [Class, Reason, Stack]),
               1
           end,
    erlang:halt(Code).

list_to_float_or_int(Text) ->
    try list_to_float(Text) catch error:badarg -> list_to_integer(Text) end.

run(Count, Warmup, Seconds, Inflight) ->
    {ok, Peer, Server} = start_server(),
    try
        %% The server's OS pid lets the script check that the node is gone afterwards.
        io:format("# erpc_echo otp=~s erts=~s schedulers=~b server_schedulers=~b server_os_pid=~s~n",
                  [erlang:system_info(otp_release), erlang:system_info(version),
                   erlang:system_info(schedulers_online),
                   erpc:call(Server, erlang, system_info, [schedulers_online]),
                   erpc:call(Server, os, getpid, [])]),
        {Median, P99} = latency(Server, Count, Warmup),
        io:format("erpc_call median_us=~.2f p99_us=~.2f~n", [Median, P99]),
        Rate = throughput(Server, Seconds, Inflight),
        io:format("erpc_procs payload=~b inflight=~b calls_per_s=~b~n",
                  [byte_size(term_to_binary(args())), Inflight, round(Rate)])
    after
        peer:stop(Peer)
    end.

%% The server node: same cookie and code path as this one; epmd's port comes through the
%% inherited ERL_EPMD_PORT environment variable.
start_server() ->
    CodeDir = filename:dirname(code:which(?MODULE)),
    peer:start_link(#{name => peers_erpc_server, host => "127.0.0.1", longnames => true,
                      wait_boot => 10000,
                      args => ["-setcookie", atom_to_list(erlang:get_cookie()),
                               "-start_epmd", "false", "-pa", CodeDir]}).

args() -> [1, <<"abc">>].

call(Server) ->
    case erpc:call(Server, ?MODULE, echo, args()) of
        [1, <<"abc">>] -> ok;
        Other -> error({wrong_echo, Other})
    end.

latency(Server, Count, Warmup) ->
    repeat(Warmup, fun() -> call(Server) end),
    Times = [timed(Server) || _ <- lists:seq(1, Count)],
    Sorted = list_to_tuple(lists:sort(Times)),
    {rank(Sorted, 0.50), rank(Sorted, 0.99)}.

timed(Server) ->
    T0 = erlang:monotonic_time(nanosecond),
    call(Server),
    erlang:monotonic_time(nanosecond) - T0.

%% Nearest-rank percentile in microseconds.
rank(Sorted, P) ->
    N = tuple_size(Sorted),
    R = max(1, min(N, ceil(P * N))),
    element(R, Sorted) / 1000.

repeat(0, _) -> ok;
repeat(N, F) -> F(), repeat(N - 1, F).

throughput(Server, Seconds, Inflight) ->
    Done = counters:new(1, [write_concurrency]),
    Stop = atomics:new(1, []),
    Workers = [spawn_monitor(fun() -> loop(Server, Done, Stop) end) || _ <- lists:seq(1, Inflight)],
    timer:sleep(500),
    C0 = counters:get(Done, 1),
    T0 = erlang:monotonic_time(nanosecond),
    timer:sleep(round(Seconds * 1000)),
    C1 = counters:get(Done, 1),
    T1 = erlang:monotonic_time(nanosecond),
    atomics:put(Stop, 1, 1),
    [receive {'DOWN', Ref, process, Pid, Why} -> Why =:= normal orelse error({worker, Why})
     after 10000 -> error(worker_stuck)
     end || {Pid, Ref} <- Workers],
    (C1 - C0) * 1.0e9 / (T1 - T0).

loop(Server, Done, Stop) ->
    case atomics:get(Stop, 1) of
        0 -> call(Server), counters:add(Done, 1, 1), loop(Server, Done, Stop);
        _ -> ok
    end.
