# gnuplot script of model_plot.sh (which sets openib, rcverbs, out,
# qp_limit, budget, ppn). Columns of ib2_info model --sweep: ranks nodes,
# then per form qps mib node_qps (openib: as given 3-5, P 6-8, S 9-11,
# X 12-14; rc_verbs: S 3-5).
set terminal pngcairo size 1100,480 font "sans,10"
set output out
set multiplot layout 1,2 title sprintf("rc\\_ib2 memory model: per process, %d processes per node, ConnectX (mlx5 queue layout)", ppn)
set logscale xy
set xrange [64:131072]
set xtics ("64" 64, "256" 256, "1k" 1024, "4k" 4096, "16k" 16384, "64k" 65536, "128k" 131072)
set xlabel "ranks"
set grid
set key top left Left reverse samplen 2 font ",9"

set ylabel "QPs per process"
set title sprintf("QPs (adapter limit max\\_qp / %d)", ppn)
plot openib  using 1:3 with linespoints pt 1 title "openib default as given (P,128 + 3 S)", \
     openib  using 1:6 with linespoints pt 7 title "openib default, P form", \
     openib  using 1:9 with linespoints pt 5 title "openib default, S form", \
     openib  using 1:12 with linespoints pt 9 title "openib default, X form", \
     rcverbs using 1:3 with linespoints pt 13 dt 2 title "UCX rc\\_verbs default (SRQ 4096 x 8 KiB)", \
     qp_limit with lines lw 2 lc rgb "red" title sprintf("max\\_qp / %d = %d", ppn, qp_limit)

set ylabel "MiB per process"
set title sprintf("memory: registered buffers, queues, X send rings (budget %d MiB)", budget)
plot openib  using 1:4 with linespoints pt 1 title "openib as given", \
     openib  using 1:7 with linespoints pt 7 title "openib P form", \
     openib  using 1:10 with linespoints pt 5 title "openib S form", \
     openib  using 1:13 with linespoints pt 9 title "openib X form", \
     rcverbs using 1:4 with linespoints pt 13 dt 2 title "UCX rc\\_verbs", \
     budget with lines lw 2 lc rgb "red" title sprintf("%d MiB", budget)
unset multiplot
