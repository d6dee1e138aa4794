# bash driver of agent-sandbox-server code contexts (embedded in the binary).
#
# Runs cells in this shell: each cell is sourced at top level, so variables
# (declare included), functions, exports and the working directory persist.
# Commands arrive on fd 3 as NUL-separated fields; events leave on fd 4 as
# JSON objects each followed by a NUL byte; the cell's own output goes to
# fds 1 and 2. SIGINT aborts the running cell, even inside loops and
# functions (an extdebug DEBUG trap unwinds to this loop), and is ignored
# between cells. A cell that ends with a non-zero status reports an error.
__abx_emit() { printf '%s\0' "$1" >&4; }
__abx_depth=${#BASH_SOURCE[@]}
__abx_running=0
__abx_interrupted=0
__abx_unwind() {
  if (( ${#BASH_SOURCE[@]} > __abx_depth + 1 )); then return 2; fi
  trap - DEBUG
  shopt -u extdebug
  set +T
  return 0
}
__abx_on_int() {
  [[ $__abx_running == 1 ]] || return 0
  __abx_interrupted=1
  shopt -s extdebug
  set -T
  trap '__abx_unwind' DEBUG
}
trap '__abx_on_int' INT
__abx_emit '{"t":"ready","version":"'"${BASH_VERSION//[^0-9A-Za-z.()_-]/}"'"}'
while :; do
  IFS= read -r -d '' __abx_command <&3
  __abx_rc=$?
  if (( __abx_rc > 128 )); then continue; fi
  (( __abx_rc == 0 )) || exit 0
  [[ $__abx_command == exec ]] || continue
  IFS= read -r -d '' __abx_seq <&3 || exit 0
  IFS= read -r -d '' __abx_count <&3 || exit 0
  __abx_saved=()
  for (( __abx_i = 0; __abx_i < __abx_count; __abx_i++ )); do
    IFS= read -r -d '' __abx_name <&3 || exit 0
    IFS= read -r -d '' __abx_value <&3 || exit 0
    if [[ -v $__abx_name ]]; then
      __abx_saved+=("$__abx_name" 1 "${!__abx_name}")
    else
      __abx_saved+=("$__abx_name" 0 "")
    fi
    export -- "$__abx_name=$__abx_value"
  done
  IFS= read -r -d '' __abx_code <&3 || exit 0
  __abx_interrupted=0
  __abx_running=1
  source <(printf '%s\n' "$__abx_code") 3<&- 4>&-
  __abx_status=$?
  __abx_running=0
  for (( __abx_i = 0; __abx_i < ${#__abx_saved[@]}; __abx_i += 3 )); do
    if [[ ${__abx_saved[__abx_i + 1]} == 1 ]]; then
      export -- "${__abx_saved[__abx_i]}=${__abx_saved[__abx_i + 2]}"
    else
      unset -v "${__abx_saved[__abx_i]}"
    fi
  done
  if (( __abx_interrupted )); then
    __abx_emit '{"t":"error","name":"Interrupted","value":"the cell was interrupted by SIGINT","traceback":""}'
  elif (( __abx_status != 0 )); then
    __abx_emit '{"t":"error","name":"ExitCode","value":"'"$__abx_status"'","traceback":""}'
  fi
  __abx_emit '{"t":"done","seq":'"$__abx_seq"'}'
done
