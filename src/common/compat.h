/* compat.h: the internal names of src/common under their old spelling (ina_x for ina__x), for src/lib and apps/ until the merge of issue 31 renames their calls; then this file and its #includes go. */
#ifndef INA_COMPAT_H
#define INA_COMPAT_H

/*
 * Issue 31: every internal symbol takes the prefix ina__; ina_ is the public
 * API's (include/ina.h) alone. The rooms renamed so far build with
 * INA_NO_COMPAT_NAMES (CMakeLists.txt), so that they cannot use an old
 * spelling; the rest (libina's src/lib, apps/) still may, through these.
 * At the merge: perl -pi -e 's/\bina_(NAME|...)\b/ina__$1/g' over them, with
 * the names below, then delete this file and the lines that include it.
 */

#ifndef INA_NO_COMPAT_NAMES
#define ina_addr_eq ina__addr_eq
#define ina_addr_is_this_host ina__addr_is_this_host
#define ina_auto_switch_threads ina__auto_switch_threads
#define ina_be32_add ina__be32_add
#define ina_be32_fadd ina__be32_fadd
#define ina_be32_fixadd ina__be32_fixadd
#define ina_be32_load ina__be32_load
#define ina_be32_minmax ina__be32_minmax
#define ina_be32_store ina__be32_store
#define ina_blake2b ina__blake2b
#define ina_blake2b_final ina__blake2b_final
#define ina_blake2b_init ina__blake2b_init
#define ina_blake2b_update ina__blake2b_update
#define ina_bname ina__bname
#define ina_bprintf ina__bprintf
#define ina_bputs ina__bputs
#define ina_busy_move_off_cpu ina__busy_move_off_cpu
#define ina_busy_yield ina__busy_yield
#define ina_cpu_relax ina__cpu_relax
#define ina_fault_active ina__fault_active
#define ina_fault_corrupt ina__fault_corrupt
#define ina_fault_parse ina__fault_parse
#define ina_fault_plan ina__fault_plan
#define ina_flag_levels ina__flag_levels
#define ina_get16 ina__get16
#define ina_get32 ina__get32
#define ina_get64 ina__get64
#define ina_getf ina__getf
#define ina_gro_segment_size ina__gro_segment_size
#define ina_gso_batch_add ina__gso_batch_add
#define ina_gso_batch_free ina__gso_batch_free
#define ina_gso_batch_init ina__gso_batch_init
#define ina_gso_batch_reset ina__gso_batch_reset
#define ina_gso_batch_room ina__gso_batch_room
#define ina_gso_batch_send ina__gso_batch_send
#define ina_hdr_decode ina__hdr_decode
#define ina_hdr_encode ina__hdr_encode
#define ina_hdr_init ina__hdr_init
#define ina_hmac_final ina__hmac_final
#define ina_hmac_init ina__hmac_init
#define ina_hmac_key_from_file ina__hmac_key_from_file
#define ina_hmac_key_init ina__hmac_key_init
#define ina_hmac_sha256 ina__hmac_sha256
#define ina_hmac_update ina__hmac_update
#define ina_host_cores ina__host_cores
#define ina_http_error ina__http_error
#define ina_http_json ina__http_json
#define ina_http_prom ina__http_prom
#define ina_http_start ina__http_start
#define ina_http_stop ina__http_stop
#define ina_join_decode ina__join_decode
#define ina_join_encode ina__join_encode
#define ina_key_mix ina__key_mix
#define ina_kmap_bytes ina__kmap_bytes
#define ina_kmap_cells ina__kmap_cells
#define ina_kmap_clear ina__kmap_clear
#define ina_kmap_free ina__kmap_free
#define ina_kmap_full ina__kmap_full
#define ina_kmap_get ina__kmap_get
#define ina_kmap_grow ina__kmap_grow
#define ina_kmap_init ina__kmap_init
#define ina_kmap_put ina__kmap_put
#define ina_lane_shard ina__lane_shard
#define ina_log ina__log
#define ina_log_format_parse ina__log_format_parse
#define ina_log_level_now ina__log_level_now
#define ina_log_level_parse ina__log_level_parse
#define ina_log_setup ina__log_setup
#define ina_mac ina__mac
#define ina_mac_append ina__mac_append
#define ina_mac_key_derive ina__mac_key_derive
#define ina_mac_key_init ina__mac_key_init
#define ina_mac_strip ina__mac_strip
#define ina_mcast_group_port_open ina__mcast_group_port_open
#define ina_mcast_guard_open ina__mcast_guard_open
#define ina_mcast_listen_opts ina__mcast_listen_opts
#define ina_mcast_port_exclusive ina__mcast_port_exclusive
#define ina_mem_equal_ct ina__mem_equal_ct
#define ina_nak_decode ina__nak_decode
#define ina_nak_encode ina__nak_encode
#define ina_op_is_sparse ina__op_is_sparse
#define ina_opauth_challenge ina__opauth_challenge
#define ina_opauth_check ina__opauth_check
#define ina_opauth_init ina__opauth_init
#define ina_opauth_key ina__opauth_key
#define ina_opauth_name ina__opauth_name
#define ina_opauth_read_token ina__opauth_read_token
#define ina_opauth_sign ina__opauth_sign
#define ina_opauth_why ina__opauth_why
#define ina_optim_apply ina__optim_apply
#define ina_optim_has_state ina__optim_has_state
#define ina_param_init ina__param_init
#define ina_parse_hostport ina__parse_hostport
#define ina_parse_hostport_list ina__parse_hostport_list
#define ina_parse_hostport_why ina__parse_hostport_why
#define ina_parse_size ina__parse_size
#define ina_prom_family ina__prom_family
#define ina_ps_assign_len ina__ps_assign_len
#define ina_ps_entry_len ina__ps_entry_len
#define ina_ps_join_decode ina__ps_join_decode
#define ina_ps_join_encode ina__ps_join_encode
#define ina_ps_shard_of ina__ps_shard_of
#define ina_ps_update_ack_encode ina__ps_update_ack_encode
#define ina_put16 ina__put16
#define ina_put32 ina__put32
#define ina_put64 ina__put64
#define ina_putf ina__putf
#define ina_rx_burst ina__rx_burst
#define ina_rx_free ina__rx_free
#define ina_rx_init ina__rx_init
#define ina_rx_init_mem ina__rx_init_mem
#define ina_session_key ina__session_key
#define ina_sha256 ina__sha256
#define ina_sha256_final ina__sha256_final
#define ina_sha256_init ina__sha256_init
#define ina_sha256_update ina__sha256_update
#define ina_shm_attach ina__ring_attach
#define ina_shm_attach_named ina__ring_attach_named
#define ina_shm_awake ina__ring_awake
#define ina_shm_create ina__ring_create
#define ina_shm_faulted ina__ring_faulted
#define ina_shm_guard_faults ina__ring_guard_faults
#define ina_shm_guard_install ina__ring_guard_install
#define ina_shm_name_valid ina__ring_name_valid
#define ina_shm_named_valid ina__ring_named_valid
#define ina_shm_peek ina__ring_peek
#define ina_shm_pop ina__ring_pop
#define ina_shm_push ina__ring_push
#define ina_shm_readable ina__ring_readable
#define ina_shm_sealed ina__ring_sealed
#define ina_shm_size ina__ring_size
#define ina_shm_sleep_prepare ina__ring_sleep_prepare
#define ina_shm_slot ina__ring_slot
#define ina_shm_slot_size ina__ring_slot_size
#define ina_shm_unlink ina__ring_unlink
#define ina_shm_unmap ina__ring_unmap
#define ina_shm_wake_needed ina__ring_wake_needed
#define ina_sock_busy_poll ina__sock_busy_poll
#define ina_sparse_check ina__sparse_check
#define ina_sparse_info ina__sparse_info
#define ina_sparse_info_exp ina__sparse_info_exp
#define ina_sparse_layout ina__sparse_layout
#define ina_sparse_layout_block ina__sparse_layout_block
#define ina_sparse_layout_places ina__sparse_layout_places
#define ina_sparse_places ina__sparse_places
#define ina_sparse_words ina__sparse_words
#define ina_sparse_words_max ina__sparse_words_max
#define ina_udp_enable_gro ina__udp_enable_gro
#endif

#endif
