# The configurations UCX's uct tests run in, sourced by run-class.sh and
# the suite. A mode names a transport and, for rc_ib2, its receive queues
# (UCX_IB2_RECEIVE_QUEUES, grammar in docs/uct_ib2.md):
#   verbs   rc_verbs, UCX's own verbs RC transport: the reference
#   mixed   rc_ib2 with its default queues (P for small messages, S above)
#   P       rc_ib2 with per-peer queues only
#   S       rc_ib2 with shared queues only
#   X       rc_ib2 with X (XRC) queues only
#   roce-cm rc_ib2 with its default queues on a RoCE device, connected
#           through rdmacm (UCX_IB2_CM=rdmacm)
#   iwarp   rc_ib2 on an iWARP device (always rdmacm; per-peer queues by
#           default, no atomics)
# The P, S and X queue sets are the ones suite 30 runs ucx_perftest with.
# Each mode's device is softverbs0, of the type ucxg_mode_env gives.
# Suite 36 runs them all, or a subset when IB2_UCXG_MODES names one (e.g.
# "verbs X").

UCXG_MODES="verbs mixed P S X roce-cm iwarp"
UCXG_MODES_ALL="$UCXG_MODES"

ucxg_mode_tl() {   # ucxg_mode_tl MODE: print the transport name
    case $1 in
    verbs) echo rc_verbs ;;
    mixed|P|S|X|roce-cm|iwarp) echo rc_ib2 ;;
    *) echo "unknown mode '$1': use one of $UCXG_MODES_ALL" >&2; return 1 ;;
    esac
}

ucxg_mode_rq() {   # ucxg_mode_rq MODE: print UCX_IB2_RECEIVE_QUEUES, or ""
    case $1 in
    verbs) echo "" ;;
    mixed|roce-cm|iwarp) echo auto ;;
    P) echo "P,128,256,192,128:P,8256,64,32,16" ;;
    S) echo "S,256,1024,512,64:S,8256,512,256,32" ;;
    X) echo "X,256,1024,512,64:X,8256,512,256,32" ;;
    *) echo "unknown mode '$1': use one of $UCXG_MODES_ALL" >&2; return 1 ;;
    esac
}

ucxg_mode_title() {   # ucxg_mode_title MODE: a heading for tables
    case $1 in
    verbs) echo "rc_verbs" ;;
    mixed) echo "rc_ib2, mixed queues (default)" ;;
    P) echo "rc_ib2, P queues only" ;;
    S) echo "rc_ib2, S queues only" ;;
    X) echo "rc_ib2, X (XRC) queues only" ;;
    roce-cm) echo "rc_ib2 on RoCE through rdmacm" ;;
    iwarp) echo "rc_ib2 on iWARP (rdmacm)" ;;
    *) echo "$1" ;;
    esac
}

# ucxg_mode_env MODE: print the run's NAME=VALUE settings, one a line; the
# first names the mode, the rest choose the device and how it connects.
ucxg_mode_env() {
    echo "IB2_UCXG_MODE=$1"
    case $1 in
    verbs|mixed|P|S|X) ;;   # softverbs' default device, InfiniBand
    roce-cm) printf '%s\n' "SOFTVERBS_DEVICES=softverbs0:eth:1" \
                            "UCX_IB2_CM=rdmacm" ;;
    iwarp) echo "SOFTVERBS_DEVICES=softverbs0:iwarp:1" ;;
    *) echo "unknown mode '$1': use one of $UCXG_MODES_ALL" >&2; return 1 ;;
    esac
}
