"""verl-pdbg-compare: how two dump folders become a verdict, for the run compare (two runs, pair by pair)
and the rollout compare (the rollout engine against the actor, token by token), each run as options.py's
CompareOptions say (one object from the command line, its defaults, and the modes honouring each option):

1. read: dumpread.py, the one boundary where dumps are read (dump.json streamed, construct.json,
   stack.json, tokens.json), into records.py's Records, each a call with its tensor rows;
2. pair: modes.py is the API of each mode (two runs, the ranks of one run); pairs.py pairs the two runs'
   rank dumps by (step, stage, rank) (rollout/steps.py: one pair per step holding both stages; its tokens
   paired by rollout/tokens.py); execute.py runs each pair's job, of either compare, in this process, a
   worker pool (-j) or on Ray (ray_cluster.py), with one fault guard, then msprobe's own compare for its CSV
   when asked (msprobe_compare.py);
3. align: engine.py runs a pair through pipeline/ (pipeline/analysis.py: one pair from reading to its
   Analysis; which record is which, by pipeline/plan.py's
   AlignmentPlan; an indexed family's calls index by index, pipeline/indices.py), each side first put
   together from its ranks by parallel/ (one class per kind of parallelism: tensor, context, expert, data,
   pipeline); the rollout's comparison points per token are rollout/table.py's, from the table of the engine
   tokens.json names (rollout/engines.py), the engine's modules named
   as transformers names them at load by rollout/renames.py; two trainer runs whose calls hold other rows
   (other world sizes, packed rows) are walked token by token too (rollout/trainers.py);
4. judge: judge.py, the rules a pair of values is held to, for both (the rollout's token walk,
   rollout/walk.py, decides each point through it); attribution names where an error is introduced;
   a pair's result is nodes.Analysis for both (its first divergence a Node, or a TokenPoint: a node at a
   token; the rollout's per-request, per-token and per-module entries in TokenSections, typed too:
   RequestSummary, TokenSummary, ModuleCount; plain data only in report/document.py);
5. verdict: verdict.py, each pair's status and reason (decide(), called by execute.py for both), the
   command's exit code and the one finding builder;
6. report: report/, the document as data (document.py, for both) and as text, JSON or HTML, each rendering
   the document only (cli.py: the command)."""
